"""The pull of a material's textures back to where they started, for a fit that starts from
textures that are already right (``init_textures`` "base_mesh": a Cycles bake of the
reference, or the base mesh's own material).

Adam steps every texel by about its learning rate whatever the size of its gradient, so a
texel the views barely see wanders as far as one they pin down: a good start turns into
noise. ``StartPrior`` adds ``weight x`` the mean absolute difference between each texture and
its start (base colour, occlusion/roughness/metallic and normal map, per texel and channel,
the normal map's times ``NORMAL_MAP_PULL``): an L1 pull whose gradient has the same size
wherever a texel stands, so a texel moves only where the views' gradient outweighs it and
stays exactly at its start elsewhere (docs/BENCHMARKS.md, "Against Blender's own route").
"""

from __future__ import annotations

import torch

from diffrec.render.material import TextureMaterial

NORMAL_MAP_PULL = 3.0
"""How many times as hard the normal map is pulled as the other textures. A bake's normals are
the reference's own; turned to make our shading match Cycles' targets, they are turned away
from what Cycles renders under other light (docs/BENCHMARKS.md, "Against Blender's own
route, round thirteen")."""


class StartPrior:
    """``weight x`` the mean over ``material``'s textures of mean |texture - start| (the
    normal map's times ``NORMAL_MAP_PULL``), their values when this is made taken as the
    start."""

    def __init__(self, material: TextureMaterial, weight: float):
        self.weight = float(weight)
        pulls = ((material.kd, 1.0), (material.ks, 1.0), (material.normal, NORMAL_MAP_PULL))
        self.textures = [(texture, pull) for texture, pull in pulls if texture is not None]
        self.starts = [texture.data.detach().clone() for texture, _ in self.textures]

    def __call__(self) -> torch.Tensor:
        distances = [pull * (texture.data - start).abs().mean()
                     for (texture, pull), start in zip(self.textures, self.starts, strict=True)]
        return self.weight * torch.stack(distances).mean()
