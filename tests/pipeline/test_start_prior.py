"""The pull of the textures back to a given start (``pipeline.start_prior``): its value and
gradient against a plain computation, and what it does under Adam: a texel the data does
not push stays at its start, one the data pushes harder than the pull still moves."""

import torch

from diffrec.pipeline.start_prior import StartPrior
from diffrec.render.material import TextureMaterial
from diffrec.render.texture2d import Texture2D


def _material(size: int = 8, normal: bool = False) -> TextureMaterial:
    generator = torch.Generator().manual_seed(0)
    kd = Texture2D(torch.rand(size, size, 3, generator=generator))
    ks = Texture2D(torch.rand(size, size, 3, generator=generator))
    normals = (Texture2D(torch.nn.functional.normalize(
        torch.rand(size, size, 3, generator=generator) + torch.tensor([0.0, 0.0, 1.0]), dim=-1))
               if normal else None)
    return TextureMaterial(kd, ks, normals)


def test_the_prior_is_the_weighted_mean_absolute_step_and_its_gradient_its_sign():
    material = _material(normal=True)
    start_kd, start_ks, start_normal = (texture.data.detach().clone() for texture in
                                        (material.kd, material.ks, material.normal))
    prior = StartPrior(material, weight=2.0)
    assert float(prior().detach()) == 0.0
    with torch.no_grad():
        material.kd.data[0, 0] += torch.tensor([0.1, -0.2, 0.0])
        material.ks.data[3, 4, 1] += 0.3
        material.normal.data[5, 6, 0] -= 0.1
    expected = 2.0 * ((material.kd.data - start_kd).abs().mean()
                      + (material.ks.data - start_ks).abs().mean()
                      + 3.0 * (material.normal.data - start_normal).abs().mean()) / 3
    value = prior()
    assert torch.allclose(value, expected)
    value.backward()
    count = material.kd.data.numel()
    assert torch.allclose(material.kd.data.grad[0, 0],
                          2.0 / 3 * torch.tensor([1.0, -1.0, 0.0]) / count)
    assert material.kd.data.grad[1:].abs().sum() == 0
    assert torch.isclose(material.ks.data.grad[3, 4, 1], torch.tensor(2.0 / 3 / count))
    assert torch.isclose(material.normal.data.grad[5, 6, 0], torch.tensor(-2.0 / count))


def _fit(weight: float, push: torch.Tensor, steps: int = 300) -> torch.Tensor:
    """kd after Adam on a data term that pulls texel (0, 0) towards +1 with strength
    ``push[0]`` and every other texel by tiny noise, plus the prior of ``weight``."""
    material = _material()
    prior = StartPrior(material, weight) if weight else None
    optimizer = torch.optim.Adam(material.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(1)
    start = material.kd.data.detach().clone()
    count = start.numel()
    for _ in range(steps):
        optimizer.zero_grad()
        noise = 1e-3 * torch.randn(start.shape, generator=generator) / count
        data = -(material.kd.data * noise).sum() - push[0] * material.kd.data[0, 0, 0] / count
        (data + (prior() if prior else 0.0)).backward()
        optimizer.step()
    return material.kd.data.detach() - start


def test_under_adam_noise_moves_nothing_and_a_strong_push_still_moves():
    without = _fit(0.0, torch.tensor([0.0]))
    assert without[1:].abs().mean() > 0.05  # Adam walks every texel on noise alone
    held = _fit(1.0, torch.tensor([0.0]))
    assert held[1:].abs().max() < 0.02, held[1:].abs().max()
    pushed = _fit(1.0, torch.tensor([5.0]))
    assert pushed[0, 0, 0] > 0.5 and pushed[1:].abs().max() < 0.02
