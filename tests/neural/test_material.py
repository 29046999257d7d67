"""NeuralMaterial: output ranges, training, chunked evaluation, engine choice, checkpoints."""

import time

import pytest
import torch

from diffrec.engines import NEURAL, EngineUnavailableError
from diffrec.neural import HashGridConfig, NeuralMaterial

SMALL = HashGridConfig(n_levels=6, log2_hashmap_size=12, base_resolution=4, per_level_scale=1.6)
BOX = ([-1.0, -2.0, 0.0], [1.0, 2.0, 3.0])


def small_material(**kwargs):
    return NeuralMaterial(*BOX, "torch", grid=SMALL, device="cpu", **kwargs)


def random_points(m, n):
    return m.bbox_min + torch.rand(n, 3) * (m.bbox_max - m.bbox_min)


def test_outputs_stay_in_their_ranges_even_when_saturated():
    m = small_material(ks_min=(0.0, 0.08, 0.0), ks_max=(1.0, 1.0, 1.0))
    with torch.no_grad():
        m.encoding.params.uniform_(-1, 1)
        m.mlp.params.mul_(200)  # drive the sigmoids to 0 and 1
    points = torch.cat([random_points(m, 2000), torch.tensor([[-50.0, 9.0, 1e3]])])
    s = m(points)
    assert (m.raw(points).abs() > 10).float().mean() > 0.5  # mostly saturated sigmoids
    for value, lo, hi in ((s.kd, [0, 0, 0], [1, 1, 1]), (s.ks, [0, 0.08, 0], [1, 1, 1]),
                          (s.normal, [-1, -1, 0], [1, 1, 1])):
        assert (value >= torch.tensor(lo)).all() and (value <= torch.tensor(hi)).all()
    # channel order and scaling: kd | ks | normal = sigmoid(raw) * (max - min) + min
    raw = torch.sigmoid(m.raw(points[:5]))
    torch.testing.assert_close(s.ks[:5, 1], raw[:, 4] * 0.92 + 0.08)
    torch.testing.assert_close(s.normal[:5, 2], raw[:, 8])
    torch.testing.assert_close(s.normal[:5, 0], raw[:, 6] * 2 - 1)


def test_points_outside_the_box_clamp_to_its_surface():
    m = small_material()
    inside = torch.tensor([[1.0, -2.0, 1.5]])
    assert torch.equal(m(torch.tensor([[7.0, -9.0, 1.5]])).kd, m(inside).kd)


def test_learns_a_colour_field():
    """kd = normalised position: 200 Adam steps on 1024 random points per step cut the mean
    absolute error at least 10x (from about 0.25 for the initial kd = 0.5)."""
    m = small_material()
    opt = torch.optim.Adam(m.parameters(), lr=0.02)

    def target(p):
        return (p - m.bbox_min) / (m.bbox_max - m.bbox_min)

    held_out = random_points(m, 2048)

    def error():
        with torch.no_grad():
            return (m(held_out).kd - target(held_out)).abs().mean().item()

    start, t0 = error(), time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # batches this small run faster on one thread (and on busy machines)
    try:
        for _ in range(200):
            p = random_points(m, 1024)
            loss = (m(p).kd - target(p)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    end = error()
    assert start == pytest.approx(0.25, abs=0.03)
    assert end < start / 10, (start, end, time.perf_counter() - t0)


def test_chunked_evaluation_equals_one_shot():
    m = small_material()
    points = random_points(m, 1000).view(10, 100, 3)
    one = m(points)
    chunked = m.evaluate(points, chunk_size=77)
    for a, b in zip(one, chunked, strict=True):
        assert b.shape == (10, 100, 3) and not b.requires_grad
        torch.testing.assert_close(a.detach(), b, rtol=0, atol=1e-6)
    assert m.evaluate(torch.zeros(0, 3)).kd.shape == (0, 3)


def test_smoothness_of_kd_and_ks():
    m = small_material()
    p = random_points(m, 500)
    assert all(torch.equal(v, torch.zeros(500)) for v in m.smoothness(p, std=0.0))
    torch.manual_seed(3)
    kd, ks = m.smoothness(p, std=0.01)
    torch.manual_seed(3)
    here, there = m(p), m(p + torch.randn_like(p) * 0.01)
    torch.testing.assert_close(kd, (there.kd - here.kd).abs().sum(-1))
    torch.testing.assert_close(ks, (there.ks - here.ks).abs().sum(-1))
    ks.mean().backward()
    assert m.encoding.params.grad.abs().sum() > 0
    with torch.no_grad():
        m.mlp.params.zero_()  # constant outputs: nothing to smooth
    assert all(torch.equal(v, torch.zeros(500)) for v in m.smoothness(p, std=0.05))


def test_state_dict_round_trip_uses_engine_neutral_keys():
    a, b = small_material(), small_material()
    assert set(a.state_dict()) == {"bbox_min", "bbox_max", "out_min", "out_max",
                                   "encoding.params", "mlp.params"}
    p = random_points(a, 64)
    assert not torch.equal(a(p).kd, b(p).kd)
    b.load_state_dict(a.state_dict())
    assert torch.equal(a(p).kd, b(p).kd)


def test_engine_choice(monkeypatch):
    monkeypatch.delenv(NEURAL.env_var, raising=False)
    assert small_material().impl == "torch"
    assert NeuralMaterial(*BOX, grid=SMALL, device="cpu").impl == "torch"  # auto on the CPU
    monkeypatch.setenv(NEURAL.env_var, "tcnn")
    with pytest.raises(EngineUnavailableError, match="CUDA"):
        NeuralMaterial(*BOX, grid=SMALL, device="cpu")
    assert small_material().impl == "torch"  # explicit beats the environment
    monkeypatch.setenv(NEURAL.env_var, "jax")
    with pytest.raises(ValueError, match="DIFFREC_NEURAL"):
        NeuralMaterial(*BOX, grid=SMALL, device="cpu")
    monkeypatch.setattr(NEURAL, "module", lambda: None)
    with pytest.raises(EngineUnavailableError, match="not installed"):
        NEURAL.resolve(torch.device("cuda"), "tcnn")
    monkeypatch.setenv(NEURAL.env_var, "auto")
    assert NEURAL.resolve(torch.device("cuda")) == "torch"


def test_bad_input_is_explained():
    with pytest.raises(ValueError, match="bbox_max must exceed"):
        NeuralMaterial([0, 0, 0], [1, 0, 1], "torch", grid=SMALL, device="cpu")
    with pytest.raises(ValueError, match="3 finite"):
        NeuralMaterial([0, 0], [1, 1, 1], "torch", grid=SMALL, device="cpu")
    m = small_material()
    with pytest.raises(ValueError, match="NaN"):
        m(torch.tensor([[0.0, float("nan"), 0.0]]))
    with pytest.raises(ValueError, match=r"\[\.\.\., 3\]"):
        m(torch.zeros(4, 2))
