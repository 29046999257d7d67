"""diffrec.render.material: fold_occlusion_ (occlusion moved into the base colour, for a
renderer that computes occlusion itself) and texture_data (what such a renderer reads)."""

import torch

from diffrec.render.material import FLAT_NORMAL, TextureMaterial
from diffrec.render.texture2d import Texture2D


def textured(size=16):
    generator = torch.Generator().manual_seed(3)
    return TextureMaterial(Texture2D(torch.rand(size, size, 3, generator=generator) * 0.8,
                                     [0.0] * 3, [1.0] * 3),
                           Texture2D(torch.tensor([0.3, 0.5, 0.1]).expand(size, size, 3).clone()))


def test_folding_occlusion_darkens_the_base_colour_and_holds_occlusion_at_zero():
    material = textured()
    kd = material.kd.data.detach().clone()
    material.fold_occlusion_()
    assert torch.allclose(material.kd.data, kd * 0.7)
    assert (material.ks.data[..., 0] == 0).all()
    with torch.no_grad():
        material.ks.data[..., 0] = 0.5
    material.clamp_()
    assert (material.ks.data[..., 0] == 0).all(), "its range holds it at 0"
    assert torch.allclose(material.ks.data[..., 1:], torch.tensor([0.5, 0.1]).expand(16, 16, 2))


def test_texture_data_gives_a_flat_normal_map_where_there_is_none():
    material = textured()
    kd, ks, normal = material.texture_data()
    assert kd is material.kd.data and ks is material.ks.data
    assert normal.shape == (16, 16, 3) and torch.equal(normal[3, 5], FLAT_NORMAL)
