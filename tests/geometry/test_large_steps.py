"""Large-steps parameterisation: the system matrix, the conjugate-gradient solve against a
dense float64 solve, warm starts, a refused non-converged solve, and the gradient."""

import pytest
import torch

from diffrec.geometry import LargeSteps, SolveNotConverged
from diffrec.geometry.large_steps import (
    conjugate_gradient,
    csr_matvec,
    scatter_matvec,
    system_matrix,
)
from diffrec.mesh.primitives import uv_sphere

pytestmark = pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")


def dense(smoother: LargeSteps) -> torch.Tensor:
    size = (len(smoother.crow) - 1,) * 2
    return torch.sparse_csr_tensor(smoother.crow, smoother.cols, smoother.values.double(),
                                   size, check_invariants=True).to_dense()


def test_the_system_is_identity_plus_weight_times_the_graph_laplacian():
    sphere = uv_sphere(8, 4)
    crow, cols, values = system_matrix(sphere.triangles, sphere.num_vertices, 3.0)
    matrix = torch.sparse_csr_tensor(crow, cols, values, (sphere.num_vertices,) * 2,
                                     check_invariants=True).to_dense()
    assert torch.equal(matrix, matrix.T)
    # rows of L = D - A sum to zero, so M's rows sum to one
    assert torch.allclose(matrix.sum(1), torch.ones(sphere.num_vertices))
    off = matrix - torch.diag(matrix.diagonal())
    assert set(off.unique().tolist()) == {0.0, -3.0}
    degree = (off != 0).sum(1)
    assert torch.equal(matrix.diagonal(), 1 + 3.0 * degree.float())
    assert degree.min() >= 3


def test_the_scatter_product_for_devices_without_sparse_kernels_matches_csr():
    sphere = uv_sphere(12, 6)
    system = system_matrix(sphere.triangles, sphere.num_vertices, 10.0)
    x = torch.randn(sphere.num_vertices, 3, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(scatter_matvec(*system, x), csr_matvec(*system, x), atol=1e-5)


@pytest.mark.parametrize("weight", [1.0, 30.0])
def test_the_float32_solve_matches_a_dense_float64_solve(weight):
    sphere = uv_sphere(24, 12)
    smoother = LargeSteps(sphere.positions, sphere.triangles, weight)
    b = torch.randn(sphere.num_vertices, 3, generator=torch.Generator().manual_seed(0))
    smoother.forward_guess.zero_()
    x = smoother(b)
    truth = torch.linalg.solve(dense(smoother), b.double())
    error = (x.double() - truth).norm(dim=0) / truth.norm(dim=0)
    assert error.max() < 1e-4, error  # tolerance 1e-5 on the residual, condition <~ 100 weight
    assert 0 < smoother.iterations[0] < 200
    assert torch.equal(smoother.forward_guess, x), "the next solve starts here"


def test_a_warm_start_takes_fewer_iterations_and_the_solution_none():
    sphere = uv_sphere(24, 12)
    smoother = LargeSteps(sphere.positions, sphere.triangles, 10.0)
    u = smoother.parameterize(sphere.positions)
    x = smoother(u)  # starts from the positions themselves: already solved
    assert smoother.iterations[0] == 0 and torch.equal(x, sphere.positions)
    step = 1e-3 * torch.randn(u.shape, generator=torch.Generator().manual_seed(2))
    smoother(u + step)
    warm = smoother.iterations[0]
    smoother.forward_guess.zero_()
    smoother(u + step)
    assert 0 < warm < smoother.iterations[0]


def test_a_solve_short_of_its_tolerance_raises_instead_of_returning_it():
    sphere = uv_sphere(24, 12)
    smoother = LargeSteps(sphere.positions, sphere.triangles, 30.0, max_iterations=3)
    smoother.forward_guess.zero_()
    with pytest.raises(SolveNotConverged, match="after 3 iterations at relative residual"):
        smoother(torch.randn(sphere.num_vertices, 3))
    nan = torch.randn(sphere.num_vertices, 3)
    nan[5, 1] = float("nan")
    with pytest.raises(SolveNotConverged, match="non-finite residual by iteration 0"):
        smoother(nan)


def test_a_zero_column_solves_to_zero_while_the_others_converge():
    sphere = uv_sphere(12, 6)
    system = system_matrix(sphere.triangles, sphere.num_vertices, 5.0)
    b = torch.randn(sphere.num_vertices, 3, generator=torch.Generator().manual_seed(3))
    b[:, 1] = 0
    inverse_diagonal = 1 / torch.sparse_csr_tensor(*system, check_invariants=True).to_dense(
    ).diagonal()
    x, _ = conjugate_gradient(lambda v: csr_matvec(*system, v), b, torch.zeros_like(b),
                              inverse_diagonal)
    assert torch.equal(x[:, 1], torch.zeros(sphere.num_vertices))
    residual = (csr_matvec(*system, x) - b).norm(dim=0)
    assert residual[0] <= 1e-5 * b[:, 0].norm() and residual[2] <= 1e-5 * b[:, 2].norm()


def test_the_gradient_is_the_inverse_applied_to_the_incoming_gradient():
    sphere = uv_sphere(10, 5)
    positions = sphere.positions.double()
    smoother = LargeSteps(positions, sphere.triangles, 10.0, tolerance=1e-12)
    u = smoother.parameterize(positions).requires_grad_(True)
    weights = torch.randn(positions.shape, dtype=torch.float64,
                          generator=torch.Generator().manual_seed(4))
    (smoother(u) * weights).sum().backward()
    expected = torch.linalg.solve(dense(smoother), weights)  # M symmetric: M^-T = M^-1
    assert torch.allclose(u.grad, expected, atol=1e-10)
    assert smoother.iterations[1] > 0
    small = LargeSteps(positions[:8], torch.tensor([[0, 1, 2], [0, 2, 3], [4, 5, 6]]), 2.0,
                       tolerance=1e-13)
    probe = torch.randn(8, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(small, (probe,), eps=1e-6, atol=1e-7)


def test_testing_convergence_every_few_iterations_only_adds_idle_ones():
    sphere = uv_sphere(24, 12)
    system = system_matrix(sphere.triangles, sphere.num_vertices, 10.0)
    b = torch.randn(sphere.num_vertices, 3, generator=torch.Generator().manual_seed(5))
    b[:, 2] *= 1e-3  # columns converge at different iterations
    inverse_diagonal = 1 / torch.sparse_csr_tensor(*system, check_invariants=True).to_dense(
    ).diagonal()
    solve = (lambda v: csr_matvec(*system, v), b, torch.zeros_like(b), inverse_diagonal)
    every, taken = conjugate_gradient(*solve, check_every=1)
    coarse, idle = conjugate_gradient(*solve, check_every=8)
    assert idle % 8 == 0 and taken <= idle < taken + 8
    assert torch.equal(every, coarse), "a converged column stops moving"
