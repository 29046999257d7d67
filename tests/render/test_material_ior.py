"""The texture material's index of refraction: one parameter, its normal-incidence reflectance
``f0``, held in ``F0_RANGE``, trained only when asked, read from a file's material and kept
by a checkpoint of a diffrec that had none."""

import pytest
import torch

from diffrec.io import Material
from diffrec.render.material import TextureMaterial
from diffrec.render.texture2d import Texture2D
from diffrec.shading.bsdf import dielectric_f0
from diffrec.shading.ranges import F0_RANGE


def textures(**kwargs) -> TextureMaterial:
    return TextureMaterial(Texture2D.constant((0.5, 0.4, 0.3)),
                           Texture2D.constant((0.0, 0.5, 0.0)), **kwargs)


def test_the_ior_is_glass_unless_given_and_trained_only_when_asked():
    glass = textures()
    assert glass.ior == pytest.approx(1.5) and not glass.f0.requires_grad
    assert [p for p in glass.parameters() if p.requires_grad] == \
        [glass.kd.data, glass.ks.data]
    learned = textures(f0=dielectric_f0(2.2), learn_f0=True)
    assert learned.f0.requires_grad and learned.ior == pytest.approx(2.2)
    read = TextureMaterial.from_material(Material(ior=1.8))
    assert read.ior == pytest.approx(1.8) and not read.f0.requires_grad


def test_f0_stays_in_its_range():
    assert float(textures(f0=0.9).f0) == pytest.approx(F0_RANGE[1])
    material = textures(learn_f0=True)
    with torch.no_grad():
        material.f0.fill_(-1.0)
    material.clamp_()
    assert material.f0.item() == pytest.approx(F0_RANGE[0])


def test_a_state_without_f0_keeps_the_modules():
    """A checkpoint written before the IOR was a parameter has no ``f0``: it loads, and the
    module keeps its own; a state with one sets it."""
    saved = textures().state_dict()
    old = {name: value for name, value in saved.items() if name != "f0"}
    material = textures(f0=0.1)
    material.load_state_dict(old)
    assert float(material.f0) == pytest.approx(0.1)
    material.load_state_dict(saved)
    assert float(material.f0) == pytest.approx(0.04)
