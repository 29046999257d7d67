"""What diffrec-against-Cycles tests share on the torch side: the bundled HDRI, the textured
test pattern and the masked PSNR (``test_cycles_agreement.py``, ``test_cycles_import.py``)."""

import importlib.util
import math
from pathlib import Path

import torch
import torch.nn.functional as F

from diffrec.render.metrics import display


def bundled_hdri(name: str = "forest") -> Path:
    """One of the CC0 studio-light HDRIs that ship inside the bpy wheel."""
    spec = importlib.util.find_spec("bpy")
    root = Path(next(iter(spec.submodule_search_locations)))
    return next(root.glob(f"*/datafiles/studiolights/world/{name}.exr"))


def pattern_textures(size: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """A smooth albedo pattern (linear RGB [size, size, 3]) and a bumpy tangent-space normal
    map (unit vectors [size, size, 3], OpenGL convention), rows top-down.

    The bumps tilt the normal by up to 17 degrees, typical of a baked normal map. Much steeper
    bumps (30 degrees: 21 dB) leave the split-sum model's reach: Cycles then clips the light
    arriving from below the geometric horizon of each tilted normal (self-shadowing), which
    split-sum does not model.
    """
    v, u = torch.meshgrid(torch.linspace(0, 1, size), torch.linspace(0, 1, size), indexing="ij")
    red = 0.5 + 0.4 * torch.sin(6 * math.pi * u)
    green = 0.5 + 0.4 * torch.cos(4 * math.pi * v)
    kd = torch.stack([red, green, torch.full_like(u, 0.3)], -1)
    slope_u = 0.3 * torch.cos(16 * math.pi * u)
    slope_v = 0.3 * torch.cos(8 * math.pi * v)
    normal = F.normalize(torch.stack([slope_u, slope_v, torch.ones_like(u)], -1), dim=-1)
    return kd, normal


def masked_psnr(ours, our_alpha, reference):
    """PSNR (dB) of the sRGB-encoded images over pixels both renderers cover fully, away from
    the silhouette. ``ours`` [N,H,W,3] and ``our_alpha`` [N,H,W,1]; ``reference`` [N,H,W,4]
    RGBA (premultiplied or straight: only fully covered pixels count)."""
    covered = ((our_alpha[..., 0] > 0.999) & (reference[..., 3] > 0.999)).float()[:, None]
    mask = (-F.max_pool2d(-covered, 5, stride=1, padding=2))[:, 0] > 0.5
    error = (display(ours) - display(reference[..., :3])).square()[mask]
    return -10 * math.log10(error.mean().item())
