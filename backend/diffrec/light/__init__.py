"""Environment lighting: Blender-compatible equirect images, cube maps, split-sum prefiltering
and the trainable ``EnvironmentLight``."""

from diffrec.light.brdf_lut import brdf_lut
from diffrec.light.envmap import EnvironmentLight
from diffrec.light.equirect import (
    cube_to_equirect,
    direction_to_equirect_uv,
    equirect_to_cube,
    equirect_uv_to_direction,
    sample_equirect,
)

__all__ = [
    "EnvironmentLight",
    "brdf_lut",
    "cube_to_equirect",
    "direction_to_equirect_uv",
    "equirect_to_cube",
    "equirect_uv_to_direction",
    "sample_equirect",
]
