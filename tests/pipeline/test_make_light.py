"""The light a run starts with: the HDRI's brightest parts shaded exactly only while it is
fixed (a learned light's map changes each step, and is measured without them)."""

import pytest
import torch

from diffrec.errors import UserError
from diffrec.light.cube import texel_solid_angles
from diffrec.pipeline.initial_state import make_light
from diffrec.protocol.settings import parse_settings


def studio() -> torch.Tensor:
    """An equirect [32, 64, 3] grey sky with one bright lamp."""
    image = torch.full((32, 64, 3), 0.2)
    image[8:10, 20:22] = 500.0
    return image


@pytest.mark.parametrize(("given", "light", "sources"), [
    ({}, "fixed", 64), ({"light_sources": 5}, "fixed", 5), ({"light_sources": 0}, "fixed", 0),
    ({}, "learn-from-envmap", 0)])
def test_sources_only_for_a_fixed_light(given, light, sources):
    settings = parse_settings({"light": light, "light_res": 32, **given})
    made = make_light(settings, studio(), "cpu")
    made.build_mips()
    assert made.source_count == sources
    assert (made.sources is None) == (sources == 0)
    if sources == 64:  # the lamp is a source (most of the light's power) and out of the map
        total = (made.base * texel_solid_angles(32).float()[..., None]).sum()
        assert made.sources.power.sum() > 0.5 * total
        assert made.specular_levels[0].max() < 1.0


def test_a_fixed_light_without_an_hdri_is_refused():
    with pytest.raises(UserError, match="envmap"):
        make_light(parse_settings({"light": "fixed"}), None, "cpu")
