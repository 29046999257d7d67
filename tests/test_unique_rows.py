"""unique_rows against torch.unique(dim=0), the contract it replaces."""

import pytest
import torch

from diffrec.rows import unique_rows


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(0, 3), (1, 3), (500, 1), (2000, 2), (3000, 3)])
def test_matches_torch_unique(dtype, shape):
    gen = torch.Generator().manual_seed(shape[0])
    rows = torch.randint(-6, 7, shape, generator=gen).to(dtype)  # many repeats
    if dtype.is_floating_point:
        rows = rows / 3
    expected, expected_inverse = torch.unique(rows, dim=0, return_inverse=True)
    unique, inverse = unique_rows(rows)
    assert torch.equal(unique, expected)
    assert torch.equal(inverse, expected_inverse)
    assert inverse.dtype == torch.int64
    assert torch.equal(unique[inverse], rows)


def test_negative_zero_equals_zero():
    unique, inverse = unique_rows(torch.tensor([[0.0, 1.0], [-0.0, 1.0]]))
    assert len(unique) == 1 and inverse.tolist() == [0, 0]


def test_rejects_a_vector():
    with pytest.raises(ValueError, match="2D"):
        unique_rows(torch.arange(4))
