"""Surface shading: microfacet terms, metallic-roughness PBR under split-sum light, normals."""

from diffrec.shading.bsdf import (
    DIELECTRIC_F0,
    DISPLAY_MODES,
    bend_toward_viewer,
    dielectric_f0,
    ior_of,
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
    "DIELECTRIC_F0",
    "DISPLAY_MODES",
    "bend_toward_viewer",
    "dielectric_f0",
    "fresnel_schlick",
    "ggx_ndf",
    "ior_of",
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
