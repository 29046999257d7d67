"""The torch engine against tinycudann with the same parameter vectors (needs CUDA + tinycudann).

Tolerances: the encoding runs in float32 on both sides, so outputs agree to float32 rounding,
except that a level's scale may differ by an ulp between numpy's and the GPU's exp2f, moving a
fraction by up to ~2.5e-4 of a cell at the finest level; the encoding is continuous, so with
features in [-1, 1] that bounds any difference by ~1e-3. The MLP runs in half precision inside
tinycudann (FullyFusedMLP), hence the looser bound on the material's outputs. A float16 hash
grid (nvdiffrec's; ``grid_precision``) rounds its features and sums its gradients in half
precision: its outputs are held to the same bound, its gradients where half can carry them.
"""

import pytest
import torch

from diffrec.neural import HashGridConfig, HashGridEncoding, NeuralMaterial
from diffrec.neural.mlp import MLP, MLPConfig

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def tcnn():
    return pytest.importorskip("tinycudann")


def test_hash_grid_encoding_matches_tinycudann(tcnn):
    cfg = HashGridConfig()
    ours = HashGridEncoding(cfg, device="cuda")
    theirs = tcnn.Encoding(3, cfg.tcnn_config(), dtype=torch.float32)
    assert theirs.params.numel() == cfg.n_params
    with torch.no_grad():
        ours.params.uniform_(-1, 1)
        theirs.params.copy_(ours.params)
    x = torch.rand(100_000, 3, device="cuda")
    a, b = ours(x), theirs(x).float()
    diff = (a - b).abs()
    assert diff.max() < 2e-3
    # the first run on a GPU (H200): mean 1.5e-5, up to 3e-4 on some points, as an ulp of a
    # level's scale moves every point of that level a little (module docstring)
    assert diff.mean() < 1e-4
    # gradients w.r.t. the parameters land in the same entries
    weights = torch.randn_like(a)
    (ga,) = torch.autograd.grad((a * weights).sum(), ours.params)
    (gb,) = torch.autograd.grad((b * weights).sum(), theirs.params)
    # the same ulp: on the H200, 4 of 12.6M entries off by up to 1.7e-3
    error = (ga - gb.float()).abs()
    assert (error <= 1e-3 + 1e-3 * gb.float().abs()).float().mean() > 1 - 1e-5
    assert error.max() < 1e-2


def test_mlp_matches_tinycudann_fully_fused(tcnn):
    cfg = MLPConfig(32, 9)
    ours = MLP(cfg, device="cuda")
    theirs = tcnn.Network(32, 9, cfg.tcnn_config())
    assert theirs.params.numel() == cfg.n_params
    with torch.no_grad():
        theirs.params.copy_(ours.params)
    x = torch.rand(4096, 32, device="cuda")
    torch.testing.assert_close(theirs(x).float(), ours(x), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("grid_precision", ["float16", "float32"])
def test_material_engines_agree_and_share_checkpoints(tcnn, grid_precision):
    box = ([-1.0, -1.0, -1.0], [1.0, 1.0, 1.0])
    fast = NeuralMaterial(*box, impl="tcnn", device="cuda", grid_precision=grid_precision)
    slow = NeuralMaterial(*box, impl="torch", device="cuda")
    assert (fast.impl, slow.impl) == ("tcnn", "torch")
    assert fast.encoding.dtype == getattr(torch, grid_precision)
    with torch.no_grad():
        fast.encoding.params.uniform_(-0.5, 0.5)
    slow.load_state_dict(fast.state_dict())
    p = torch.rand(20_000, 3, device="cuda") * 2 - 1
    for a, b in zip(fast(p), slow(p), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-2)


@pytest.mark.parametrize(("grid_precision", "loss_scale"), [("float32", 1.0), ("float16", 1e3)])
def test_the_hash_grids_gradient_follows_the_torch_engines(tcnn, grid_precision, loss_scale):
    """The hash grid's parameter gradient through the whole material (a mean loss over 200k
    points, as a 512-px view's covered pixels) against the torch engine's. tiny-cuda-nn's MLP
    runs in half precision, hence the bounds: on an H200, float32 gave relative L2 0.075,
    cosine 0.997. A float16 grid rounds 91 % of this loss's gradient entries (median 5e-9) to
    zero (relative L2 0.72, cosine 0.77); scaled by 1,000 it agrees (0.026, 0.9997): the
    reason float32 is the default."""
    box = ([-1.0, -1.0, -1.0], [1.0, 1.0, 1.0])
    fast = NeuralMaterial(*box, impl="tcnn", device="cuda", grid_precision=grid_precision)
    slow = NeuralMaterial(*box, impl="torch", device="cuda")
    with torch.no_grad():
        fast.encoding.params.uniform_(-0.1, 0.1)
    slow.load_state_dict(fast.state_dict())
    p = torch.rand(200_000, 3, device="cuda") * 2 - 1
    target = torch.rand(200_000, 3, device="cuda")
    grads = []
    for material in (fast, slow):
        loss = loss_scale * (material(p).kd - target).square().mean()
        (grad,) = torch.autograd.grad(loss, material.encoding.params)
        grads.append(grad.float())
    theirs, ours = grads
    relative = ((theirs - ours).norm() / ours.norm()).item()
    cosine = torch.nn.functional.cosine_similarity(theirs, ours, dim=0).item()
    print(f"{grid_precision} hash grid, loss x{loss_scale:g}, against the torch engine: "
          f"relative L2 {relative:.4f}, cosine {cosine:.5f}")
    assert relative < 0.1, relative
    assert cosine > 0.99, cosine
