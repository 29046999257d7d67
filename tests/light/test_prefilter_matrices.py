"""The GGX prefilter's sparse operator, built straight into CSR form (each row's taps sorted,
repeats summed), against a hand-worked case and against torch's own COO construction; its
backward (with the transpose or scattering the operator's entries) against the dense product
and finite differences."""

import math

import pytest
import torch

from diffrec.light import prefilter
from diffrec.light.prefilter import (
    _csr_from_taps,
    _csr_transposed,
    _ggx_matrix,
    _ggx_operator,
    _ggx_transpose,
    _transposed_product,
    samples_for_level,
)


def test_repeated_taps_of_a_row_are_summed_and_sorted():
    index = torch.tensor([[2, 0, 2], [1, 1, 1], [3, 0, 1]])
    weight = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [0.5, 0.25, 0.125]])
    crow, col, values = _csr_from_taps(index, weight)
    assert crow.tolist() == [0, 2, 3, 6]
    assert col.tolist() == [0, 2, 1, 0, 1, 3]
    assert values.tolist() == [2.0, 4.0, 15.0, 0.25, 0.125, 0.5]
    dense = torch.sparse_csr_tensor(crow, col, values, (3, 4), check_invariants=True).to_dense()
    assert dense.tolist() == [[2, 0, 4, 0], [0, 15, 0, 0], [0.25, 0.125, 0, 0.5]]
    for chunk in (None, 1, 2, 4):  # the transpose built a few entries at a time, or at once
        crow_t, col_t, values_t = _csr_transposed(crow, col, values, 4, chunk)
        assert torch.equal(torch.sparse_csr_tensor(crow_t, col_t, values_t, (4, 3),
                                                   check_invariants=True).to_dense(),
                           dense.T)


@pytest.mark.parametrize("texels_a_chunk", [None, 5])  # None: all 384 texels in one chunk
def test_operator_matrices_equal_the_coalesced_coo_construction(monkeypatch, texels_a_chunk):
    base, out, roughness = 16, 8, 0.35
    samples = samples_for_level(out)
    if texels_a_chunk is not None:  # the matrix is built a few rows at a time
        monkeypatch.setattr(prefilter, "_CHUNK_TAPS", texels_a_chunk * 4 * samples)
    _ggx_matrix.cache_clear()
    _ggx_transpose.cache_clear()
    index, weight = _ggx_operator(base, out, roughness, samples, "cpu")
    texels = sum(6 * (base >> level) ** 2 for level in range(int(math.log2(base)) + 1))
    rows = torch.arange(len(index)).repeat_interleave(index.shape[1])
    coo = torch.sparse_coo_tensor(torch.stack([rows, index.flatten().long()]),
                                  weight.flatten().double(), (len(index), texels),
                                  check_invariants=True).coalesce()
    matrix = _ggx_matrix(base, out, roughness, samples, "cpu", torch.float64)
    transposed = _ggx_transpose(base, out, roughness, samples, "cpu", torch.float64)
    torch.testing.assert_close(matrix.to_dense(), coo.to_dense(), rtol=0, atol=1e-15)
    torch.testing.assert_close(transposed.to_dense(), coo.to_dense().T, rtol=0, atol=1e-15)
    assert matrix.values().numel() == coo.values().numel()  # every repeat merged
    assert {matrix.col_indices().dtype, transposed.crow_indices().dtype} == {torch.int32}


@pytest.mark.parametrize("chunk", [None, 1, 7])  # entries scattered at a time (None: default)
def test_transposed_product_without_the_transpose_equals_the_dense_product(chunk):
    samples = samples_for_level(4)
    matrix = _ggx_matrix(8, 4, 0.5, samples, "cpu", torch.float64)
    dense = torch.randn(matrix.shape[0], 3, dtype=torch.float64,
                        generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(_transposed_product(matrix, dense, chunk),
                               matrix.to_dense().T @ dense, rtol=0, atol=1e-13)


@pytest.mark.parametrize("backward", ["transpose", "scatter"])
def test_prefilter_gradient_against_finite_differences(monkeypatch, backward):
    monkeypatch.setenv(prefilter.BACKWARD_ENV, backward)
    _ggx_matrix.cache_clear()
    _ggx_transpose.cache_clear()
    cube = torch.rand(6, 4, 4, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))

    def prefiltered(cube):
        return prefilter.ggx_prefilter(prefilter.box_pyramid(cube), 2, 0.6)

    assert torch.autograd.gradcheck(prefiltered, (cube.requires_grad_(),))
    assert _ggx_matrix.cache_info().currsize == 1  # the operator the prefilter used
    assert _ggx_transpose.cache_info().currsize == (backward == "transpose")


def test_a_map_without_gradients_builds_no_transpose():
    """A fixed light's prefilter (no gradient asked for, or none recorded) only multiplies:
    the same values, and no transpose built until a map that wants gradients comes."""
    _ggx_matrix.cache_clear()
    _ggx_transpose.cache_clear()
    cube = torch.rand(6, 8, 8, 3, generator=torch.Generator().manual_seed(2))
    fixed = prefilter.ggx_prefilter(prefilter.box_pyramid(cube), 4, 0.5)
    with torch.no_grad():
        unrecorded = prefilter.ggx_prefilter(prefilter.box_pyramid(cube.requires_grad_()), 4, 0.5)
    assert _ggx_transpose.cache_info().currsize == 0 and _ggx_matrix.cache_info().currsize == 1
    learned = prefilter.ggx_prefilter(prefilter.box_pyramid(cube), 4, 0.5)
    assert _ggx_transpose.cache_info().currsize == 1
    assert torch.equal(fixed, unrecorded) and torch.equal(fixed, learned.detach())
    learned.sum().backward()
    expected = torch.autograd.grad(
        prefilter.apply_taps(torch.cat([level.reshape(-1, 3) for level in
                                        prefilter.box_pyramid(cube)]),
                             *_ggx_operator(8, 4, 0.5, samples_for_level(4), "cpu")).sum(),
        cube)[0]
    torch.testing.assert_close(cube.grad, expected, rtol=1e-5, atol=1e-6)


def test_an_unknown_backward_is_refused(monkeypatch):
    monkeypatch.setenv(prefilter.BACKWARD_ENV, "gather")
    with pytest.raises(ValueError, match=prefilter.BACKWARD_ENV):
        prefilter.ggx_prefilter(prefilter.box_pyramid(torch.ones(6, 2, 2, 1)), 2, 0.5)


@pytest.mark.gpu
@pytest.mark.parametrize("backward", ["transpose", "scatter"])
def test_prefilter_on_cuda_matches_the_cpu_in_float64(monkeypatch, backward):
    """The operator built on the GPU, and each backward there (the transpose's sparse product,
    or the entries scattered with float atomics), against the same prefilter on the CPU in
    float64: a 32^2 cube prefiltered to 16^2, values and gradients to float32's precision."""
    monkeypatch.setenv(prefilter.BACKWARD_ENV, backward)
    _ggx_matrix.cache_clear()
    _ggx_transpose.cache_clear()
    cube, weights = torch.rand(2, 6, 32, 32, 3, dtype=torch.float64,
                               generator=torch.Generator().manual_seed(3))
    weights = weights[:, ::2, ::2]  # the prefiltered map's [6, 16, 16, 3]

    def value_and_gradient(cube):
        cube = cube.clone().requires_grad_()
        out = prefilter.ggx_prefilter(prefilter.box_pyramid(cube), 16, 0.4)
        (out * weights.to(out)).sum().backward()
        return out.detach().cpu().double(), cube.grad.cpu().double()

    expected_value, expected_gradient = value_and_gradient(cube)
    value, gradient = value_and_gradient(cube.float().cuda())
    torch.testing.assert_close(value, expected_value, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gradient, expected_gradient, rtol=1e-4, atol=1e-6)
    assert _ggx_transpose.cache_info().currsize == (2 if backward == "transpose" else 0)
