"""The MLP's function and tiny-cuda-nn FullyFusedMLP parameter layout, checked by hand in numpy."""

import math

import numpy as np
import pytest
import torch

from diffrec.neural.mlp import MLP, MLPConfig


def numpy_mlp(params, n_in, n_out, width, hidden):
    """Slice the flat vector by the documented layout (padded input cols, 16-row padded output)."""
    in_pad, out_pad = -(-n_in // 16) * 16, -(-n_out // 16) * 16
    shapes = [(width, in_pad)] + [(width, width)] * (hidden - 1) + [(out_pad, width)]
    mats, at = [], 0
    for rows, cols in shapes:
        mats.append(params[at : at + rows * cols].reshape(rows, cols))  # row-major, rows = outputs
        at += rows * cols
    assert at == params.size

    def run(x):
        h = np.concatenate([x, np.ones((x.shape[0], in_pad - n_in))], axis=1)  # tcnn pads with 1
        for m in mats[:-1]:
            h = np.maximum(h @ m.T, 0.0)
        return (h @ mats[-1].T)[:, :n_out]

    return run


@pytest.mark.parametrize(("n_in", "n_out", "width", "hidden"), [(32, 9, 32, 2), (20, 3, 16, 3)])
def test_forward_matches_the_documented_layout(n_in, n_out, width, hidden):
    mlp = MLP(MLPConfig(n_in, n_out, width, hidden)).double()
    x = torch.randn(10, n_in, dtype=torch.float64)
    want = numpy_mlp(mlp.params.detach().numpy(), n_in, n_out, width, hidden)(x.numpy())
    np.testing.assert_allclose(mlp(x).detach().numpy(), want, rtol=1e-12, atol=1e-12)


def test_nvdiffrec_shape_has_2560_parameters_and_padding_rows_do_nothing():
    cfg = MLPConfig(32, 9)
    assert cfg.n_params == 32 * 32 + 32 * 32 + 16 * 32  # output padded from 9 to 16 rows
    mlp = MLP(cfg)
    x = torch.randn(5, 32)
    before = mlp(x)
    with torch.no_grad():
        mlp.weights()[-1][9:] = 123.0  # the 7 padding rows of the output matrix
    assert torch.equal(mlp(x), before)
    mlp(x).sum().backward()
    assert (mlp.params.grad.view(-1)[-7 * 32 :] == 0).all()


def test_xavier_uniform_initialisation_per_matrix():
    mlp = MLP(MLPConfig(32, 9, 64, 2))
    for w, (rows, cols) in zip(mlp.weights(), mlp.config.matrix_shapes, strict=True):
        bound = math.sqrt(6 / (rows + cols))
        assert w.abs().max() <= bound
        assert w.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.1)


def test_gradcheck():
    mlp = MLP(MLPConfig(4, 3, 16, 2)).double()
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    params = mlp.params.detach().clone().requires_grad_()

    def run(p, inp):
        return torch.func.functional_call(mlp, {"params": p}, (inp,))

    assert torch.autograd.gradcheck(run, (params, x), fast_mode=True)


def test_config_errors():
    with pytest.raises(ValueError, match="FullyFusedMLP"):
        MLPConfig(32, 9, n_neurons=48).tcnn_config()
    with pytest.raises(ValueError, match=">= 1"):
        MLPConfig(32, 0)
    with pytest.raises(ValueError, match=r"\[N, 32\]"):
        MLP(MLPConfig(32, 9))(torch.zeros(2, 31))
    cfg = MLPConfig(32, 9).tcnn_config()
    assert cfg["otype"] == "FullyFusedMLP" and cfg["output_activation"] == "None"
    assert (cfg["n_neurons"], cfg["n_hidden_layers"], cfg["activation"]) == (32, 2, "ReLU")
