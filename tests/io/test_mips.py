"""Export mip chains (``io.mips``): linear-space 2x2 box averages (never sRGB-space),
renormalised normals, fitted levels first, the chain's end."""

import torch

from diffrec.color import linear_to_srgb, srgb_to_linear
from diffrec.io import Material
from diffrec.io.mips import box_level, mip_chain


def test_box_levels_average_linear_values_not_srgb_ones():
    checker = torch.tensor([[0.0, 1.0], [1.0, 0.0]])[..., None].expand(2, 2, 3)
    level = box_level("kd", checker)
    torch.testing.assert_close(level, torch.full((1, 1, 3), 0.5))
    # what an engine's average of the sRGB PNG gives instead: 0.5 encoded, 0.214 linear
    srgb_space = srgb_to_linear(linear_to_srgb(checker).mean(dim=(0, 1)))
    assert abs(float(srgb_space[0]) - float(level[0, 0, 0])) > 0.25


def test_normal_levels_are_renormalised():
    tilted = torch.nn.functional.normalize(torch.tensor([[[1.0, 0, 1], [-1.0, 0, 1]]]), dim=-1)
    level = box_level("normal", tilted)
    torch.testing.assert_close(level, torch.tensor([[[0.0, 0.0, 1.0]]]))
    plain = box_level("ks", tilted)  # the same numbers as data: averaged, not renormalised
    torch.testing.assert_close(plain, torch.tensor([[[0.0, 0.0, 2 ** -0.5]]]))


def test_chains_take_the_fitted_levels_then_box_averages_to_1x1():
    kd = torch.rand(8, 4, 3)
    fitted = torch.full((4, 2, 3), 0.25)
    chain = mip_chain(Material(kd=kd, mips={"kd": [fitted]}), "kd")
    assert [tuple(level.shape) for level in chain] == [(8, 4, 3), (4, 2, 3), (2, 1, 3),
                                                       (1, 1, 3)]
    assert torch.equal(chain[0], kd) and torch.equal(chain[1], fitted)
    torch.testing.assert_close(chain[2], torch.full((2, 1, 3), 0.25))  # from the fitted level
    box = mip_chain(Material(kd=kd), "kd")
    torch.testing.assert_close(box[-1][0, 0], kd.mean(dim=(0, 1)))


def test_a_chain_stops_at_an_odd_side():
    assert [level.shape[:2] for level in mip_chain(Material(kd=torch.rand(12, 8, 3)), "kd")] == [
        (12, 8), (6, 4), (3, 2)]
