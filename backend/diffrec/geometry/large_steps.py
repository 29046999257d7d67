"""Vertex positions parameterised as in Nicolet, Jacobson, Jakob, "Large Steps in Inverse
Rendering of Geometry" (SIGGRAPH Asia 2021), on plain torch ops (CPU, CUDA, MPS).

The optimiser moves ``u = (I + lambda L) x`` instead of the positions ``x`` [V, 3] (scene
units, as are ``u``'s), with ``L = D - A`` the mesh's combinatorial (graph) Laplacian: degree
on the diagonal, -1 per edge. The positions are ``x = (I + lambda L)^-1 u``; a gradient on ``x``
reaches ``u`` through the same (symmetric) inverse, which smooths it, so a step in ``u`` moves
the surface smoothly however large it is. ``lambda`` (dimensionless, >= 0) sets how smooth.

Solves use Jacobi-preconditioned conjugate gradients on all three coordinates at once, each
warm-started from the previous solve's solution, to a relative residual tolerance; a solve
that does not converge within its iteration cap raises ``SolveNotConverged`` (never returns a
half-solved answer).
"""

from __future__ import annotations

import torch

from diffrec.mesh.topology import unique_edges

TOLERANCE = 1e-5  # relative residual, ||M x - b|| / ||b|| per coordinate: float32 reaches it
MAX_ITERATIONS = 1000  # the condition number <= 1 + 2 lambda max-degree, whatever the mesh size
DEVICE_CHECK_EVERY = 8  # iterations between convergence tests on an accelerator


class SolveNotConverged(RuntimeError):
    """A conjugate-gradient solve did not reach its tolerance within its iteration cap."""


def system_matrix(triangles: torch.Tensor, num_vertices: int, weight: float,
                  dtype: torch.dtype = torch.float32
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``M = I + weight * (D - A)`` of the mesh ``triangles`` [T, 3] (vertices
    ``0..num_vertices-1``; a vertex on no triangle has the row of ``I``) in CSR form on the
    triangles' device: ``(crow_indices [V + 1], col_indices [nnz], values [nnz])``, columns
    sorted within each row. Symmetric positive definite for ``weight >= 0``."""
    device = triangles.device
    edges, _ = unique_edges(triangles)
    vertices = torch.arange(num_vertices, device=device)
    rows = torch.cat([edges[:, 0], edges[:, 1], vertices])
    cols = torch.cat([edges[:, 1], edges[:, 0], vertices])
    degree = torch.bincount(edges.reshape(-1), minlength=num_vertices).to(dtype)
    values = torch.cat([torch.full((2 * len(edges),), -weight, dtype=dtype, device=device),
                        1.0 + weight * degree])
    order = torch.argsort(rows * num_vertices + cols)
    rows, cols, values = rows[order], cols[order], values[order]
    counts = torch.bincount(rows, minlength=num_vertices)
    crow = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
    return crow, cols, values


def csr_matvec(crow: torch.Tensor, cols: torch.Tensor, values: torch.Tensor,
               x: torch.Tensor) -> torch.Tensor:
    """``M @ x`` for ``M`` in CSR form (``system_matrix``) and ``x`` [V, K]: a torch sparse CSR
    product on CPU and CUDA; elsewhere (MPS, no CSR kernels) ``scatter_matvec``."""
    if x.device.type not in ("cpu", "cuda"):
        return scatter_matvec(crow, cols, values, x)
    size = (len(crow) - 1, len(crow) - 1)
    return torch.sparse_csr_tensor(crow, cols, values, size, check_invariants=False) @ x


def scatter_matvec(crow: torch.Tensor, cols: torch.Tensor, values: torch.Tensor,
                   x: torch.Tensor) -> torch.Tensor:
    """``csr_matvec`` by gathers and ``index_add_`` only, for devices without sparse
    kernels."""
    rows = torch.repeat_interleave(torch.arange(len(crow) - 1, device=x.device),
                                   crow[1:] - crow[:-1])
    return x.new_zeros(x.shape).index_add_(0, rows, values[:, None] * x[cols])


def conjugate_gradient(matvec, b: torch.Tensor, guess: torch.Tensor,
                       inverse_diagonal: torch.Tensor, tolerance: float = TOLERANCE,
                       max_iterations: int = MAX_ITERATIONS, check_every: int | None = None
                       ) -> tuple[torch.Tensor, int]:
    """Solve ``M x = b`` for symmetric positive definite ``M`` (``matvec(x) = M @ x``) and each
    column of ``b`` [V, K] at once, with the Jacobi preconditioner ``inverse_diagonal`` [V]
    (``1 / diag(M)``), starting from ``guess`` [V, K]. Stops when every column's residual is
    at most ``tolerance`` times that column's ``||b||`` (a zero column solves to zero).
    Returns ``(x, iterations taken)``; raises ``SolveNotConverged`` after ``max_iterations``.
    A column stops moving once it has converged, while the others go on. The convergence test
    (a read from the device, which waits for it) runs every ``check_every`` iterations: by
    default every one on the CPU, every ``DEVICE_CHECK_EVERY`` elsewhere (the idle iterations
    after convergence are counted).
    """
    if check_every is None:
        check_every = 1 if b.device.type == "cpu" else DEVICE_CHECK_EVERY
    tiny = torch.finfo(b.dtype).tiny
    norm = torch.linalg.vector_norm(b, dim=0)
    x = torch.where(norm > 0, guess, torch.zeros_like(guess))
    r = b - matvec(x)
    goal = tolerance * norm
    z = inverse_diagonal[:, None] * r
    p = z
    rz = (r * z).sum(0)
    for iteration in range(max_iterations + 1):
        residual = torch.linalg.vector_norm(r, dim=0)
        active = ~(residual <= goal)  # a NaN residual is never converged
        if iteration % check_every == 0 or iteration == max_iterations:
            converged, finite = torch.stack([~active.any(), residual.isfinite().all()]).tolist()
            if not finite:
                raise SolveNotConverged(f"conjugate gradients met a non-finite residual by "
                                        f"iteration {iteration}: the right-hand side or the "
                                        "starting guess is not finite")
            if converged:
                return x, iteration
            if iteration == max_iterations:
                break
        mp = matvec(p)
        curvature = (p * mp).sum(0)
        alpha = torch.where(active & (curvature > 0), rz / curvature.clamp(min=tiny),
                            torch.zeros_like(rz))
        x = x + alpha * p
        r = r - alpha * mp
        z = inverse_diagonal[:, None] * r
        rz_next = (r * z).sum(0)
        beta = torch.where(active & (rz > 0), rz_next / rz.clamp(min=tiny), torch.zeros_like(rz))
        p = torch.where(active, z + beta * p, torch.zeros_like(p))
        rz = rz_next
    ratio = residual / norm.clamp(min=tiny)
    raise SolveNotConverged(
        f"conjugate gradients stopped after {max_iterations} iterations at relative residual "
        f"{ratio.max().item():.3g} (tolerance {tolerance:g}): the system is too ill-conditioned "
        "for the cap (a very large weight?)")


class _Solve(torch.autograd.Function):
    """``x = M^-1 u`` with ``M`` symmetric, so ``dL/du = M^-1 dL/dx``: one more solve."""

    @staticmethod
    def forward(ctx, u, smoother):
        ctx.smoother = smoother
        return smoother.solve(u, smoother.forward_guess)

    @staticmethod
    def backward(ctx, grad):
        return ctx.smoother.solve(grad.contiguous(), ctx.smoother.backward_guess), None


class LargeSteps(torch.nn.Module):
    """The parameterisation ``u = (I + weight L) x`` of one mesh's vertex positions.

    ``positions`` [V, 3] the starting positions, ``triangles`` [T, 3] their connectivity,
    ``weight`` the paper's lambda (>= 0). ``parameterize(x)`` gives ``u``; calling the module
    on ``u`` gives ``x`` differentiably. Each solve starts from the previous one's solution
    (the forward solve's from the positions, the backward's from the gradient it last
    returned), kept as buffers so that a checkpoint (``state_dict``) resumes exactly. (Over
    several ranks each rank's backward solve starts from its own gradient while all resume
    from rank 0's state: exact to the solver's tolerance only.)
    ``iterations``: the (forward, backward) solves' latest iteration counts.
    """

    def __init__(self, positions: torch.Tensor, triangles: torch.Tensor, weight: float,
                 tolerance: float = TOLERANCE, max_iterations: int = MAX_ITERATIONS):
        super().__init__()
        if weight < 0:
            raise ValueError(f"the large-steps weight must be >= 0, not {weight}")
        self.weight, self.tolerance, self.max_iterations = weight, tolerance, max_iterations
        crow, cols, values = system_matrix(triangles, len(positions), weight, positions.dtype)
        self.register_buffer("crow", crow, persistent=False)
        self.register_buffer("cols", cols, persistent=False)
        self.register_buffer("values", values, persistent=False)
        degree = (crow[1:] - crow[:-1] - 1).to(values)  # each row: its edges and the diagonal
        self.register_buffer("inverse_diagonal", 1.0 / (1.0 + weight * degree), persistent=False)
        self.register_buffer("forward_guess", positions.detach().clone())
        self.register_buffer("backward_guess", torch.zeros_like(positions))
        self.iterations = (0, 0)

    def matvec(self, x: torch.Tensor) -> torch.Tensor:
        """``M @ x`` for ``x`` [V, K]."""
        return csr_matvec(self.crow, self.cols, self.values.to(x.dtype), x)

    def parameterize(self, positions: torch.Tensor) -> torch.Tensor:
        """``u = M x`` for positions ``x`` [V, 3] (no gradient)."""
        with torch.no_grad():
            return self.matvec(positions)

    def solve(self, b: torch.Tensor, guess: torch.Tensor) -> torch.Tensor:
        """``M^-1 b`` from ``guess``, which is then overwritten by the solution (the next
        solve's start). Raises ``SolveNotConverged``."""
        with torch.no_grad():
            x, taken = conjugate_gradient(self.matvec, b, guess.to(b.dtype),
                                          self.inverse_diagonal.to(b.dtype), self.tolerance,
                                          self.max_iterations)
            guess.copy_(x)
        forward, backward = self.iterations
        self.iterations = (taken, backward) if guess is self.forward_guess else (forward, taken)
        return x

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        """Positions ``x = M^-1 u`` [V, 3], differentiable in ``u``."""
        return _Solve.apply(u, self)
