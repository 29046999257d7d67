"""The pull of a material's textures back to where they started, for a fit that starts from
textures that are already right (``init_textures`` "base_mesh": a Cycles bake of the
reference, or the base mesh's own material).

Adam steps every texel by about its learning rate whatever the size of its gradient, so a
texel the views barely see wanders as far as one they pin down: a good start turns into
noise. ``StartPrior`` adds ``weight x`` the mean absolute difference between each texture and
its start (base colour, occlusion/roughness/metallic and normal map together, per texel and
channel): an L1 pull whose gradient has the same size wherever a texel stands, so a texel
moves only where the views' gradient outweighs it and stays exactly at its start elsewhere
(docs/BENCHMARKS.md, "Against Blender's own route").
"""

from __future__ import annotations

import torch

from diffrec.render.material import TextureMaterial


class StartPrior:
    """``weight x`` mean |texture - start| over ``material``'s textures, their values when
    this is made taken as the start."""

    def __init__(self, material: TextureMaterial, weight: float):
        self.weight = float(weight)
        self.textures = [texture for texture in (material.kd, material.ks, material.normal)
                         if texture is not None]
        self.starts = [texture.data.detach().clone() for texture in self.textures]

    def __call__(self) -> torch.Tensor:
        distances = [(texture.data - start).abs().mean()
                     for texture, start in zip(self.textures, self.starts, strict=True)]
        return self.weight * torch.stack(distances).mean()
