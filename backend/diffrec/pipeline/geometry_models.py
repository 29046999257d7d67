"""Trainable geometry for the optimisation passes, behind one interface.

Each model is an ``nn.Module`` with ``mesh() -> Mesh`` (the current surface with vertex normals,
and tangents when it has UVs), ``regularizer(progress) -> scalar`` (``progress`` in [0, 1]
through the pass) and ``uniform_adam``: whether its parameters are to be stepped by
``pipeline.optimizers.UniformAdam`` rather than Adam.
"""

from __future__ import annotations

import torch

from diffrec.errors import UserError
from diffrec.geometry import (
    DMTetGeometry,
    FlexiCubesGeometry,
    LargeSteps,
    sdf_regularizer_weight,
)
from diffrec.mesh import Mesh
from diffrec.mesh.normals import (
    vertex_normals,
    welded_normals,
    with_grouped_normals,
    with_vertex_normals,
)
from diffrec.mesh.tangents import with_tangents
from diffrec.mesh.topology import unique_edges


def uniform_laplacian(positions: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    """Umbrella operator ``v_i - mean of v_i's neighbours`` per vertex, [V, 3]."""
    neighbour_sum = torch.zeros_like(positions)
    neighbour_sum.index_add_(0, edges[:, 0], positions[edges[:, 1]])
    neighbour_sum.index_add_(0, edges[:, 1], positions[edges[:, 0]])
    degree = torch.zeros(len(positions), dtype=positions.dtype, device=positions.device)
    ones = torch.ones(len(edges), dtype=positions.dtype, device=positions.device)
    degree.index_add_(0, edges[:, 0], ones)
    degree.index_add_(0, edges[:, 1], ones)
    return positions - neighbour_sum / degree.clamp(min=1)[:, None]


class ExplicitGeometry(torch.nn.Module):
    """A given mesh, fixed (``trainable=False``, materials mode) or with trainable vertex
    positions (refine mode, pass 2 of reconstruct).

    ``large_steps`` 0: the parameters are per-vertex offsets, stepped by Adam; with
    ``along_normals`` one length per vertex along its normal on the given mesh (the surface
    moves, the textures do not slide over it). ``> 0``: the parameter is
    ``u = (I + large_steps L) x`` of the positions ``x`` (``geometry.large_steps``), stepped
    by ``UniformAdam`` (``uniform_adam``); the positions are solved from it once per value of
    ``u``.

    ``laplace``: "relative" penalises the Laplacian of the offsets from the given mesh (keeps
    its detail), "absolute" that of the positions (smooths); weight
    ``laplace_scale * (1 - t)``; in either parameterisation.

    ``unit`` (scene units, plain offsets only): the length of an offset of 1, in which the
    regulariser measures too; at the object's size, a rate and a weight act alike on the same
    object modelled at any scale (Adam steps each offset by about its rate).

    ``pull`` (plain offsets only): the regulariser adds ``pull x`` the mean absolute offset
    (in ``unit``, per vertex and coordinate), whatever the pass's progress. Its gradient has
    the same size for every vertex, so a vertex moves only where the views push it harder;
    Adam alone steps a vertex the views barely push about as far as one they pin down.

    Shading normals: the mesh's own where it has them (flat faces and hard edges, as its file
    gives them; a fixed mesh keeps them as they are, a moving one recomputes each within its
    own corners, ``with_grouped_normals``), else smooth vertex normals.
    """

    def __init__(self, mesh: Mesh, trainable: bool, laplace: str = "relative",
                 laplace_scale: float = 10000.0, large_steps: float = 0.0,
                 along_normals: bool = False, unit: float = 1.0, pull: float = 0.0):
        super().__init__()
        if along_normals and large_steps > 0:
            raise ValueError("along_normals moves plain offsets: large_steps must be 0")
        if (unit != 1.0 or pull) and large_steps > 0:
            raise ValueError("a unit and a pull measure plain offsets: large_steps must be 0")
        if not unit > 0:
            raise ValueError(f"unit must be a positive length, got {unit}")
        if not pull >= 0:
            raise ValueError(f"pull must be a weight of at least 0, got {pull}")
        mesh = (with_vertex_normals(mesh) if mesh.normals is None else
                welded_normals(mesh).replace(tangents=None, tangent_triangles=None))
        if mesh.uvs is not None:
            mesh = with_tangents(mesh)
        self._initial = mesh
        self.trainable = trainable
        self.laplace, self.laplace_scale, self.unit, self.pull = (laplace, laplace_scale, unit,
                                                                  pull)
        self.uniform_adam = trainable and large_steps > 0
        self.register_buffer("initial_positions", mesh.positions.detach().clone())
        self.register_buffer("edges", unique_edges(mesh.triangles)[0])
        if self.uniform_adam:
            self.smoother = LargeSteps(mesh.positions.detach(), mesh.triangles, large_steps)
            self.u = torch.nn.Parameter(self.smoother.parameterize(self.initial_positions))
        else:
            directions = (vertex_normals(mesh.positions, mesh.triangles) if along_normals
                          else None)
            self.register_buffer("directions", directions, persistent=False)
            self.offset = torch.nn.Parameter(
                mesh.positions.new_zeros(len(mesh.positions), 1 if along_normals else 3),
                requires_grad=trainable)
        self._solved: tuple | None = None  # (which u, its version, grad mode; positions)

    def positions(self) -> torch.Tensor:
        """The current vertex positions [V, 3], scene units."""
        if not self.uniform_adam:
            moved = self.offset if self.directions is None else self.offset * self.directions
            return self.initial_positions + moved * self.unit
        key = (self.u.device, self.u.data_ptr(), self.u._version, torch.is_grad_enabled())
        if self._solved is None or self._solved[0] != key:
            self._solved = (key, self.smoother(self.u))
        return self._solved[1]

    def mesh(self) -> Mesh:
        base = self._initial.to(self.initial_positions.device)
        if not self.trainable:
            return base
        moved = with_grouped_normals(base.replace(positions=self.positions()))
        return with_tangents(moved) if moved.uvs is not None else moved

    def regularizer(self, progress: float) -> torch.Tensor:
        total = self.initial_positions.new_zeros(())
        if not self.trainable:
            return total
        if self.laplace_scale:
            positions = self.positions()
            field = positions - self.initial_positions if self.laplace == "relative" else positions
            term = uniform_laplacian(field / self.unit, self.edges).square().mean()
            total = total + self.laplace_scale * (1.0 - progress) * term
        if self.pull:
            total = total + self.pull * self.offset.abs().mean()
        return total


class IsosurfaceGeometry(torch.nn.Module):
    """DMTet or FlexiCubes over a cube of side ``scale`` centred at ``center`` (pass 1)."""

    uniform_adam = False

    def __init__(self, kind: str, grid_res: int, scale: float, center, device,
                 sdf_weight: float = 0.2, seed: int = 0):
        super().__init__()
        generator = torch.Generator(device="cpu").manual_seed(seed)
        if kind == "dmtet":
            self.surface = DMTetGeometry(grid_res, scale, device, generator=generator)
        elif kind == "flexicubes":
            self.surface = FlexiCubesGeometry(grid_res // 2, scale, device, generator=generator)
        else:
            raise ValueError(f"unknown isosurface {kind!r}")
        self.register_buffer("center", torch.as_tensor(center, dtype=torch.float32, device=device))
        self.sdf_weight = sdf_weight

    @torch.no_grad()
    def start_from_hull(self, cameras, alpha: torch.Tensor) -> str:
        """Replace the starting SDF by the signed distance to the views' visual hull
        (``pipeline.visual_hull``), clamped to two grid cells either side. ``alpha [N, H,
        W]``: the masks. Keeps the sphere when fewer than half the views show any background
        (no masks: photos composited on their own background) or when the hull holds no grid
        vertex; returns which start was taken ("visual-hull" or "sphere")."""
        from diffrec.pipeline.visual_hull import hull_distance

        if (alpha < 0.5).flatten(1).any(1).float().mean() < 0.5:
            return "sphere"
        points = self.surface.grid_vertices + self.center
        distance = hull_distance(points, cameras.to(points.device), alpha.to(points.device))
        if (distance > 0).all():
            return "sphere"
        band = 2 * self.surface.scale / self.surface.grid_res
        self.surface.sdf.copy_(distance.clamp(-band, band).to(self.surface.sdf))
        return "visual-hull"

    @torch.no_grad()
    def start_random(self, seed: int = 0) -> None:
        """Replace the starting SDF by the reference system's: uniform in (-0.9, 0.1] at every
        grid vertex (inside where negative, so nine vertices in ten), drawn on the CPU from
        ``seed``. A cloud of fragments over the whole grid, so that every part of the box
        gets gradients from the first iteration."""
        sdf = self.surface.sdf
        generator = torch.Generator().manual_seed(seed)
        sdf.copy_(0.1 - torch.rand(sdf.shape, generator=generator).to(sdf))

    def mesh(self) -> Mesh:
        vertices, triangles = self.surface.extract()
        if len(triangles) == 0:
            centre = ", ".join(f"{value:.3g}" for value in self.center.tolist())
            raise UserError(
                f"the surface vanished (no triangles left in the box of side "
                f"{self.surface.scale:.3g} around ({centre})): the object as the views see it "
                "does not fill that box, most often because the box is smaller than the object "
                "or beside it; set mesh_scale to a box that holds the whole object, in the "
                "capture's units, and check that the cameras see it")
        return with_vertex_normals(Mesh(vertices + self.center, triangles))

    def regularizer(self, progress: float) -> torch.Tensor:
        weight = sdf_regularizer_weight(progress, 1.0, start=self.sdf_weight)
        return weight * self.surface.sdf_regularizer()
