"""Surface shading: microfacet terms, metallic-roughness PBR under split-sum light, normals."""

from diffrec.shading.bsdf import (
    DISPLAY_MODES,
    bend_toward_viewer,
    lookup_brdf_lut,
    pbr,
    perturb_normal,
    shade,
    shading_normal,
)
from diffrec.shading.microfacet import (
    fresnel_schlick,
    ggx_ndf,
    lambert,
    smith_g2,
    smith_lambda,
    specular_brdf,
)

__all__ = [
    "DISPLAY_MODES",
    "bend_toward_viewer",
    "fresnel_schlick",
    "ggx_ndf",
    "lambert",
    "lookup_brdf_lut",
    "pbr",
    "perturb_normal",
    "shade",
    "shading_normal",
    "smith_g2",
    "smith_lambda",
    "specular_brdf",
]
