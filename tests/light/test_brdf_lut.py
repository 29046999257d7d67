"""The split-sum (A, B) table: energy, limits, an independent float64 quadrature, caching."""

import math

import numpy as np
import pytest
import torch

from diffrec.light.brdf_lut import brdf_lut, split_sum_terms


@pytest.fixture(scope="module")
def lut(tmp_path_factory):
    return brdf_lut(32, cache_dir=tmp_path_factory.mktemp("cache"))


def centres(n):
    return (np.arange(n) + 0.5) / n


def test_energy_is_conserved(lut):
    assert (lut >= 0).all()
    assert (lut.sum(-1) <= 1 + 1e-5).all()


def test_mirror_limit(lut):
    # roughness -> 0: D is a delta at h = n, G2 -> 1, so A + B = 1, B = (1 - n.v)^5.
    mu = torch.tensor(centres(32), dtype=torch.float64)
    a, b = split_sum_terms(mu, torch.tensor(1e-3, dtype=torch.float64))
    assert torch.allclose(b, (1 - mu) ** 5, atol=1e-4)
    assert torch.allclose(a + b, torch.ones_like(a), atol=1e-4)
    # The table's first row (roughness 1/64, alpha 2.4e-4) is already at the limit.
    assert np.allclose(lut[0, :, 1].numpy(), (1 - centres(32)) ** 5, atol=1e-3)
    assert lut[0, -1, 0].item() == pytest.approx(1.0, abs=1e-3)  # normal incidence: A -> 1


def brute_force(mu, roughness, n=800):
    """Integrate D G2 F cos / (4 cos cos) over the hemisphere of l on a (theta, phi) grid, with
    its own GGX, height-correlated Smith and Schlick terms; returns (A, B)."""
    alpha2 = roughness**4
    theta = (np.arange(n) + 0.5) / n * (math.pi / 2)
    phi = (np.arange(2 * n) + 0.5) / (2 * n) * 2 * math.pi
    th, ph = np.meshgrid(theta, phi, indexing="ij")
    l = np.stack([np.sin(th) * np.cos(ph), np.sin(th) * np.sin(ph), np.cos(th)], -1)
    v = np.array([math.sqrt(1 - mu * mu), 0.0, mu])
    h = l + v
    h /= np.linalg.norm(h, axis=-1, keepdims=True)
    nh, vh, nl = h[..., 2], h @ v, l[..., 2]
    d = alpha2 / (math.pi * (nh * nh * (alpha2 - 1) + 1) ** 2)

    def lam(c):
        return (np.sqrt(1 + alpha2 * (1 - c * c) / (c * c)) - 1) / 2

    g = 1 / (1 + lam(mu) + lam(nl))
    fc = (1 - vh) ** 5
    base = d * g / (4 * mu) * np.sin(th) * (math.pi / 2 / n) * (2 * math.pi / (2 * n))
    return ((1 - fc) * base).sum(), (fc * base).sum()


@pytest.mark.parametrize(("mu", "roughness"), [(0.9, 0.4), (0.5, 0.6), (0.2, 0.8), (0.7, 1.0)])
def test_agrees_with_brute_force_quadrature(mu, roughness):
    a, b = split_sum_terms(
        torch.tensor(mu, dtype=torch.float64), torch.tensor(roughness, dtype=torch.float64)
    )
    ra, rb = brute_force(mu, roughness)
    assert a.item() == pytest.approx(ra, abs=2e-3)
    assert b.item() == pytest.approx(rb, abs=2e-3)


def test_table_holds_the_terms_at_texel_centres(lut):
    c = centres(32)
    for i, j in [(5, 20), (31, 3), (16, 16)]:
        a, b = split_sum_terms(
            torch.tensor(c[j], dtype=torch.float64), torch.tensor(c[i], dtype=torch.float64)
        )
        assert lut[i, j].tolist() == pytest.approx([a.item(), b.item()], abs=1e-6)


def test_cache_is_written_reused_and_repaired(tmp_path):
    first = brdf_lut(8, cache_dir=tmp_path)
    (path,) = tmp_path.glob("*.npy")
    assert torch.equal(brdf_lut(8, cache_dir=tmp_path), first)
    np.save(path, np.full((8, 8, 2), 7.0, dtype=np.float32))  # implausible values
    assert torch.equal(brdf_lut(8, cache_dir=tmp_path), first)
    path.write_bytes(b"garbage")  # truncated / corrupt file
    assert torch.equal(brdf_lut(8, cache_dir=tmp_path), first)
    assert np.array_equal(np.load(path), first.numpy())
