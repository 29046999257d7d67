"""Value ranges of the material channels (nvdiffrec's defaults), as (low, high) RGB triples.

``kd`` base colour in [0, 1]; ``ks`` = (occlusion, roughness, metallic) with roughness at
least 0.08 (nvdiffrec's ``ks_min``); tangent-space normals with z >= 0 (facing out of the
surface).
"""

KD_RANGE = ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
KS_RANGE = ((0.0, 0.08, 0.0), (1.0, 1.0, 1.0))
NORMAL_RANGE = ((-1.0, -1.0, 0.0), (1.0, 1.0, 1.0))
