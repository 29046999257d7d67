"""What targets and renders are composited over: the ``background`` setting's kinds
(``diffrec.protocol.settings.BACKGROUNDS``, plus nvdiffrec's per-pixel "noise"), decided here
alone for training, validation and anything else that renders against targets.
"""

from __future__ import annotations

import torch

__all__ = ["CHECKER_CELLS", "background_for", "composite"]

CHECKER_CELLS = 8  # squares along the longer image side of the "checker" background


def _uniform_on_device(shape: tuple[int, ...], generator: torch.Generator | None,
                       like: torch.Tensor) -> torch.Tensor:
    """Uniform [0, 1) values of ``like``'s dtype, drawn on its device by a generator that
    ``generator`` (a CPU one; None: torch's global one) seeds with one draw: per-pixel noise
    costs the host neither the numbers nor their copy to a GPU."""
    seed = int(torch.randint(2**62, (), generator=generator))
    drawn_by = torch.Generator(like.device).manual_seed(seed)
    return torch.rand(shape, generator=drawn_by, device=like.device, dtype=like.dtype)


def background_for(kind: str, targets: torch.Tensor,
                   generator: torch.Generator | None = None,
                   part: tuple[slice, int] | None = None) -> torch.Tensor:
    """What targets ``[B, H, W, 4]`` (straight alpha) and renders are composited over,
    broadcastable to ``[B, H, W, 3]``: "random" one uniform colour per image from
    ``generator`` (black without one, as validation judges), "white", "black", "checker"
    (grey squares of 0.25 and 0.75), "reference" the targets' own colour (photos as taken),
    "noise" a uniform colour per pixel from ``generator`` (nvdiffrec's training).
    ``part``: (rows, batch size) when ``targets`` are those rows of a larger batch (a rank's
    share): "random" and "noise" draw for the whole batch and keep the rows, so that the
    generator moves, and each view gets its colours, as in one process."""
    batch, height, width = targets.shape[:3]
    if kind == "random":
        if generator is None:
            return targets.new_zeros(3)
        rows, drawn = part or (slice(None), batch)
        return torch.rand(drawn, 1, 1, 3, generator=generator)[rows].to(targets)
    if kind == "noise":
        rows, drawn = part or (slice(None), batch)
        return _uniform_on_device((drawn, height, width, 3), generator, targets)[rows]
    if kind in ("white", "black"):
        return targets.new_full((3,), 1.0 if kind == "white" else 0.0)
    if kind == "checker":
        cell = max(height, width) / CHECKER_CELLS
        rows = (torch.arange(height, device=targets.device) // cell).long()
        cols = (torch.arange(width, device=targets.device) // cell).long()
        parity = ((rows[:, None] + cols[None, :]) % 2).to(targets.dtype)
        return (0.25 + 0.5 * parity)[None, :, :, None].expand(1, -1, -1, 3)
    if kind == "reference":
        return targets[..., :3]
    raise ValueError(f"unknown background {kind!r}")


def composite(targets: torch.Tensor, background: torch.Tensor) -> torch.Tensor:
    """Straight-alpha ``[B, H, W, 4]`` targets over ``background`` -> ``[B, H, W, 3]``."""
    alpha = targets[..., 3:4]
    return targets[..., :3] * alpha + background * (1 - alpha)
