"""An environment light written as probe.hdr (Radiance RGBE) and read back is the same light."""

import torch

from diffrec import raster
from diffrec.io import read_image, write_image
from diffrec.light.envmap import EnvironmentLight
from diffrec.light.equirect import equirect_pixel_directions


def test_light_survives_a_probe_hdr_round_trip(tmp_path):
    # a smooth HDR environment: a bright lobe towards +X+Z over a dimmer coloured sky
    d = equirect_pixel_directions(64, 128).float()
    lobe = torch.exp(8 * ((d * torch.tensor([0.6, 0.0, 0.8])).sum(-1, keepdim=True) - 1))
    image = 20 * lobe + torch.tensor([0.2, 0.3, 0.5]) * (1 + d[..., 2:3])
    light = EnvironmentLight.from_equirect(image, resolution=32)

    write_image(tmp_path / "probe.hdr", light.to_equirect(64, 128).detach().numpy())
    back = EnvironmentLight.from_equirect(torch.from_numpy(read_image(tmp_path / "probe.hdr")),
                                          resolution=32)
    relative = (back.base - light.base).abs() / light.base.abs().clamp(min=0.05)
    assert relative.mean() < 0.02, "resampling twice and RGBE's 8-bit mantissa stay small"
    # and what matters for shading, the prefiltered light, agrees closely
    light.build_mips()
    back.build_mips()
    normals = torch.nn.functional.normalize(torch.randn(500, 3), dim=-1)
    ctx = raster.RasterContext("cpu", impl="torch")
    torch.testing.assert_close(back.diffuse(normals, ctx=ctx), light.diffuse(normals, ctx=ctx),
                               rtol=0.02, atol=0)
