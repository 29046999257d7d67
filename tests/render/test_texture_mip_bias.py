"""``TextureMaterial``'s ``mip_bias`` (setting ``texture_mip_bias``): the level a pixel reads
is log2 of its footprint in texels plus the bias. A one-texel checker seen with a footprint of
two texels reads level 1, the 2x2 box average (0.5 everywhere); a bias of -16 reads the
checker's own texels; -0.5 reads half way between the two levels."""

import torch

from diffrec import raster
from diffrec.protocol.settings import parse_settings
from diffrec.render.gbuffer import GBuffer
from diffrec.render.material import TextureMaterial
from diffrec.render.texture2d import Texture2D

SIZE = 8
CTX = raster.RasterContext("cpu", impl="torch")


def _checker() -> torch.Tensor:
    rows, cols = torch.meshgrid(torch.arange(SIZE), torch.arange(SIZE), indexing="ij")
    return ((rows + cols) % 2).float()[..., None].expand(SIZE, SIZE, 3)


def _gbuffer(footprint_texels: float) -> GBuffer:
    """Every texel's centre once, each pixel covering ``footprint_texels`` texels a side."""
    centres = (torch.arange(SIZE) + 0.5) / SIZE
    v, u = torch.meshgrid(centres, centres, indexing="ij")
    uv = torch.stack([u, v], -1)[None]
    uv_da = torch.zeros(1, SIZE, SIZE, 4)
    uv_da[..., 0] = uv_da[..., 3] = footprint_texels / SIZE  # du/dX, dv/dY
    zeros = torch.zeros(1, SIZE, SIZE, 3)
    return GBuffer(rast=torch.zeros(1, SIZE, SIZE, 4), mask=torch.ones(1, SIZE, SIZE, 1),
                   position=zeros, normal=zeros, face_normal=zeros, view=zeros, uv=uv,
                   uv_da=uv_da, ctx=CTX)


def _kd(mip_bias: float) -> torch.Tensor:
    texture = _checker()
    material = TextureMaterial(Texture2D(texture), Texture2D(texture), mip_bias=mip_bias)
    with torch.no_grad():
        return material(_gbuffer(2.0)).kd


def test_a_two_texel_footprint_reads_the_box_average_and_a_low_bias_the_texels():
    checker = _checker().flip(0)[None]  # rows top-down in storage, v up in UVs
    assert torch.allclose(_kd(0.0), torch.full_like(checker, 0.5), atol=1e-5)
    assert torch.allclose(_kd(-16.0), checker, atol=1e-5)
    assert torch.allclose(_kd(-0.5), 0.5 * checker + 0.25, atol=1e-5)


def test_the_setting_defaults_to_no_bias_and_takes_any_number():
    assert parse_settings({}).material.texture_mip_bias == 0.0
    assert parse_settings({"texture_mip_bias": -16}).material.texture_mip_bias == -16.0


def test_given_levels_are_read_instead_of_box_averages_and_take_gradients():
    """``TextureMaterial.mips``: level 1 given as 0.2 everywhere is what a footprint of two
    texels reads (the box average would be 0.5); a gradient reaches the given level and
    matches a finite difference."""
    texture = _checker()
    material = TextureMaterial(Texture2D(texture), Texture2D(texture))
    given = [torch.full((SIZE >> k, SIZE >> k, 3), 0.2, requires_grad=True)
             for k in range(1, 4)]
    material.mips = {"kd": given}
    kd = material(_gbuffer(2.0)).kd
    assert torch.allclose(kd, torch.tensor(0.2))
    kd.sum().backward()
    analytic = float(given[0].grad[1, 2, 0])
    with torch.no_grad():
        def total(delta):
            nudged = [level.clone() for level in given]
            nudged[0][1, 2, 0] += delta
            material.mips = {"kd": nudged}
            return float(material(_gbuffer(2.0)).kd.double().sum())
        numeric = (total(1e-2) - total(-1e-2)) / 2e-2
    assert analytic > 0 and abs(analytic - numeric) < 1e-3 * max(1.0, abs(numeric))


def test_from_material_reads_a_materials_levels_and_moves_them_with_the_module():
    from diffrec.io import Material

    texture = _checker()
    levels = [torch.full((SIZE >> k, SIZE >> k, 3), 0.25) for k in range(1, 4)]
    shader = TextureMaterial.from_material(Material(kd=texture, mips={"kd": levels}))
    assert torch.equal(shader.mips["kd"][0], levels[0])
    assert shader.double().mips["kd"][2].dtype == torch.float64
