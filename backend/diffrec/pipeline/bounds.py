"""Upper bounds on a run's settings, from the memory it would need on its device.

An optimisation whose settings cannot fit (``batch: 10**7``, ``texture_res: 65536``) must be
refused before it starts, with the setting named, not found out hours later or never (one
such step can hold a device for longer than anyone waits); so must images too small to
score (``check_image_size``). ``check_bounds`` estimates the
memory of each part of a run from per-element costs (below, in bytes; generous, so that only
settings that clearly cannot fit are refused) and raises ``UserError`` when one part, or all
together, need more than the device has. The server checks at submit, ``diffrec optimize``
before it loads anything.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from diffrec.errors import UserError

if TYPE_CHECKING:
    from diffrec.protocol.settings import Settings

GIB = 2**30
PIXEL_BYTES = 1024
"""Per rendered pixel sample (batch × train_res² × layers × spp²): rasterizer outputs,
interpolated attributes, shading terms and the autograd graph that keeps them for the
backward pass."""
TEXEL_BYTES = 192
"""Per texel of texture_res²: kd, ks and normal (9 float32), their gradients and Adam's two
moments, and a mip chain (x 4/3)."""
GRID_CELL_BYTES = 2048
"""Per cell of grid³ (reconstruct): six tetrahedra, the SDF and deformation of their
corners with gradients and Adam's moments, and marching tetrahedra's intermediates."""
TRIANGLE_BYTES = 512
"""Per triangle of a starting mesh: corner positions, normals, tangents and UVs with their
gradients."""
MIP_FIT_PIXEL_BYTES = 192
"""Per pixel of each view the mip levels' fit keeps after the passes (``pipeline.mip_fit``:
a G-buffer of about 27 float32 and a reference of 4, at every scale, x 4/3), rounded up; its
views from half the training size down count a quarter."""


def device_memory_bytes(device: str) -> int:
    """Memory of ``device`` (a torch device string, or "auto": ``diffrec.devices``' rule): a
    CUDA device's total memory, else this machine's physical memory (MPS shares it)."""
    import torch

    from diffrec.devices import default_device

    if device == "auto":
        device = str(default_device())
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.device(device)).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_bounds(settings: Settings, memory_bytes: int, triangles: int | None = None) -> None:
    """Raise UserError if ``settings`` cannot fit in ``memory_bytes``;
    ``triangles`` is the starting mesh's size when known."""
    size, rendering = settings.size, settings.rendering
    samples = size.batch * size.train_res ** 2 * rendering.layers * rendering.spp ** 2
    parts = {
        "batch × train_res² × layers × spp²": (samples * PIXEL_BYTES,
                                               "lower batch or train_res"),
        "texture_res²": (size.texture_res ** 2 * TEXEL_BYTES, "lower texture_res"),
    }
    if settings.run.mode == "reconstruct":
        parts["grid³"] = (size.grid ** 3 * GRID_CELL_BYTES, "lower grid")
    if triangles:
        parts["triangles"] = (triangles * TRIANGLE_BYTES, "send a mesh with fewer triangles")
    have = f"the device has {memory_bytes / GIB:.1f} GiB"
    for name, (needed, advice) in parts.items():
        if needed > memory_bytes:
            raise UserError(f"{name} would need about {needed / GIB:.1f} GiB of memory and "
                            f"{have}: {advice}")
    total = sum(needed for needed, _ in parts.values())
    if total > memory_bytes:
        name, (_, advice) = max(parts.items(), key=lambda item: item[1][0])
        raise UserError(f"these settings would need about {total / GIB:.1f} GiB of memory "
                        f"together and {have}: {advice} (the largest part is {name})")
    if settings.material.mip_iterations:  # after the passes: beside the textures only
        from diffrec.pipeline.mip_fit import FIT_VIEWS, FULL_SIZE_VIEWS, JUDGE_VIEWS

        views = FULL_SIZE_VIEWS + JUDGE_VIEWS + FIT_VIEWS // 4  # those from half the size
        pixels = views * size.train_res ** 2 * rendering.layers
        needed = pixels * MIP_FIT_PIXEL_BYTES + parts["texture_res²"][0]
        if needed > memory_bytes:
            raise UserError(f"the fit of the mip levels (as much as {views} views at "
                            f"train_res²) would need about {needed / GIB:.1f} GiB of memory "
                            f"and {have}: lower train_res, or set mip_iterations 0")


def check_image_size(settings: Settings, width: int, height: int) -> None:
    """Raise UserError if ``width x height`` images, resized to ``train_res`` on their longer
    side as a run trains and scores them, have fewer than MIN_SIDE pixels on a side (the
    score's SSIM window): found before the run, not after its training."""
    from diffrec.protocol.images import MIN_SIDE, longest_side_size, smallest_longest_side

    resized = longest_side_size(width, height, settings.size.train_res)
    if min(resized) < MIN_SIDE:
        sent = f" (from {width}x{height})" if resized != (width, height) else ""
        raise UserError(
            f"train_res {settings.size.train_res} makes the images {resized[0]}x{resized[1]} "
            f"pixels{sent}, and a run's score needs at least {MIN_SIDE} on each side: raise "
            f"train_res to {smallest_longest_side(width, height)} or more")


def check_ranks(settings: Settings, device: str) -> None:
    """Raise UserError if ``settings.limits.ranks`` (over 1) cannot run on ``device`` (a torch
    device string; ``devices.ranks_device_type``), is over the room there (one rank per GPU on CUDA,
    per CPU core otherwise) or its batch does not split evenly over them; checked before any
    rank starts."""
    import torch

    from diffrec.devices import ranks_device_type
    from diffrec.pipeline.sampler import rank_share

    if settings.limits.ranks == 1:
        return
    on_cuda = ranks_device_type(device) == "cuda"
    available = torch.cuda.device_count() if on_cuda else os.cpu_count() or 1
    if settings.limits.ranks > available:
        raise UserError(f"ranks {settings.limits.ranks} is more than this worker has room for "
                        f"({available}: one per GPU, or per CPU core without one): "
                        f"lower ranks to {available} or fewer")
    rank_share(settings.size.batch, settings.limits.ranks)
