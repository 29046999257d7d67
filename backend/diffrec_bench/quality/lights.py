"""The lights a scene is relit under (plain data, no bpy): two of Blender's bundled studio
HDRIs other than the scene's own, and one strong sun over a black world.

The two HDRIs follow the scene's own in the suite's order of HDRIs (``recipes.RECIPES``), so
each scene gets two it was not fitted under and every HDRI relights two scenes or more. The sun's
``strength`` is Blender's (irradiance, W/m²: a white diffuse face square to it shows about
``strength / pi``), ``elevation`` and ``azimuth`` in degrees, ``angle`` its apparent diameter
in degrees (sharp shadows).
"""

from __future__ import annotations

from .recipes import RECIPES

SUN = {"name": "sun", "kind": "sun", "strength": 3.0, "elevation": 50.0, "azimuth": 30.0,
       "angle": 0.5}


def suite_hdris() -> list[str]:
    """The suite's HDRIs, each once, in the order of the recipes."""
    return list(dict.fromkeys(recipe["hdri"] for recipe in RECIPES.values()))


def relight_lights(scene: str) -> list[dict]:
    """Scene ``scene``'s relighting: the two HDRIs after its own (cyclically), then the sun;
    each a dict with ``name`` (unique among them) and ``kind`` (``hdri`` or ``sun``)."""
    hdris = suite_hdris()
    own = hdris.index(RECIPES[scene]["hdri"])
    others = [hdris[(own + step) % len(hdris)] for step in (1, 2)]
    return [*({"name": hdri.removesuffix(".exr"), "kind": "hdri", "hdri": hdri}
              for hdri in others), dict(SUN)]
