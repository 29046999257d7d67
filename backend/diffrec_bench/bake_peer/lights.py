"""The lights an asset is judged under (plain data, no bpy): its fitted HDRI (the light the
training views were rendered with), the next of the quality suite's HDRIs and the suite's sun
(``diffrec_bench.quality.lights``), as ``diffrec_bench.quality.relight.use_light`` takes them, each
with a ``role``: ``fitted``, ``other`` or ``sun``."""

from __future__ import annotations

from diffrec_bench.quality.lights import SUN, suite_hdris

from .catalogue import ASSETS

ROLES = ("fitted", "other", "sun")


def judging_lights(asset: str, roles=ROLES) -> list[dict]:
    """Asset ``asset``'s lights of the ``roles`` asked for, in ``ROLES`` order."""
    hdris = suite_hdris()
    own = ASSETS[asset]["hdri"]
    other = hdris[(hdris.index(own) + 1) % len(hdris)]
    every = {"fitted": {"name": own.removesuffix(".exr"), "kind": "hdri", "hdri": own},
             "other": {"name": other.removesuffix(".exr"), "kind": "hdri", "hdri": other},
             "sun": dict(SUN)}
    return [{**every[role], "role": role} for role in ROLES if role in roles]
