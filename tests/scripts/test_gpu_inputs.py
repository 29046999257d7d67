"""scripts/gpu_prepare's light: an EXR with negative texels (Blender's forest.exr has 826)
written as the Radiance .hdr the GPU benchmark reads, which cannot hold them."""

import numpy as np

from diffrec.io import read_image, write_image
from diffrec_bench.gpu_inputs import write_radiance_light


def test_negative_texels_are_clipped_and_the_rest_kept_to_radiance_precision(tmp_path):
    light = np.random.default_rng(0).uniform(0.01, 50.0, (8, 16, 3)).astype(np.float32)
    light[2, 3] = (-0.002, 0.5, 0.5)  # one texel with a negative channel
    light[5, 7] = (-0.001, -0.001, -0.001)
    write_image(tmp_path / "light.exr", light)
    assert write_radiance_light(tmp_path / "light.exr", tmp_path / "light.hdr") == 2
    written = read_image(tmp_path / "light.hdr")
    expected = np.clip(light, 0.0, None)
    assert written.min() == 0.0 and written[5, 7].tolist() == [0.0, 0.0, 0.0]
    # RGBE: a shared exponent, 8-bit mantissas: each texel to 1 % of its brightest channel
    error = np.abs(written - expected).max(-1)
    assert (error <= 0.01 * expected.max(-1)).all(), error.max()
