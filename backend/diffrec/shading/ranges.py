"""Value ranges of the material channels (nvdiffrec's defaults), as (low, high) RGB triples.

``kd`` base colour in [0, 1]; ``ks`` = (occlusion, roughness, metallic) with roughness at
least 0.08 (nvdiffrec's ``ks_min``); tangent-space normals with z >= 0 (facing out of the
surface); ``f0``, the dielectric's reflectance at normal incidence, from 0.02 (water, IOR 1.33)
to 0.25 (IOR 3: a white gloss a quarter as bright as a mirror, past any gem's).
"""

KD_RANGE = ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
KS_RANGE = ((0.0, 0.08, 0.0), (1.0, 1.0, 1.0))
NORMAL_RANGE = ((-1.0, -1.0, 0.0), (1.0, 1.0, 1.0))
F0_RANGE = (0.02, 0.25)
