"""Torch ``interpolate``: barycentric interpolation of vertex attributes over ``rast``."""

from __future__ import annotations

import torch


def _diff_channels(diff_attrs, num_channels: int) -> list[int]:
    if diff_attrs == "all":
        return list(range(num_channels))
    channels = [int(c) for c in diff_attrs]
    if any(c < 0 or c >= num_channels for c in channels):
        raise IndexError(f"diff_attrs {channels} outside 0..{num_channels - 1}")
    return channels


def interpolate(attr, rast, tri, rast_db=None, diff_attrs=None):
    """See ``diffrec.raster.interpolate`` for the contract.

    ``attr`` ``[B, V, C]`` is indexed per image; ``[1, V, C]`` and ``[V, C]`` are shared by all
    images (the latter is also range mode's layout).
    """
    if attr.ndim not in (2, 3):
        raise ValueError(f"attr must be [V, C] or [B, V, C], got shape {tuple(attr.shape)}")
    if rast.ndim != 4 or rast.shape[-1] != 4:
        raise ValueError(f"rast must be [B, H, W, 4], got shape {tuple(rast.shape)}")
    batch_size, height, width, _ = rast.shape
    per_image = attr.ndim == 3 and attr.shape[0] > 1
    if per_image and attr.shape[0] != batch_size:
        raise ValueError(f"attr has batch {attr.shape[0]} but rast has batch {batch_size}")
    num_verts, num_channels = attr.shape[-2], attr.shape[-1]
    flat_attr = attr.reshape(-1, num_channels)

    flat_rast = rast.reshape(-1, 4)
    pix = torch.nonzero(flat_rast[:, 3] > 0).squeeze(1)
    tri_id = flat_rast[pix, 3].to(torch.int64) - 1
    vidx = tri.to(device=rast.device, dtype=torch.int64)[tri_id]  # [P, 3]
    if per_image:
        vidx = vidx + (torch.div(pix, height * width, rounding_mode="floor") * num_verts)[:, None]
    a0, a1, a2 = flat_attr[vidx[:, 0]], flat_attr[vidx[:, 1]], flat_attr[vidx[:, 2]]
    u, v = flat_rast[pix, 0:1], flat_rast[pix, 1:2]
    values = a2 + u * (a0 - a2) + v * (a1 - a2)
    out = torch.zeros(flat_rast.shape[0], num_channels, dtype=values.dtype, device=rast.device)
    out = out.index_put((pix,), values).reshape(batch_size, height, width, num_channels)

    if diff_attrs is None or rast_db is None:
        return out, torch.empty(0, device=rast.device)
    channels = _diff_channels(diff_attrs, num_channels)
    db = rast_db.reshape(-1, 4)[pix]  # (du/dX, du/dY, dv/dX, dv/dY)
    da = (a0 - a2)[:, channels]
    dv = (a1 - a2)[:, channels]
    d_dx = da * db[:, 0:1] + dv * db[:, 2:3]
    d_dy = da * db[:, 1:2] + dv * db[:, 3:4]
    deriv = torch.stack((d_dx, d_dy), -1).reshape(len(pix), 2 * len(channels))
    out_da = torch.zeros(flat_rast.shape[0], 2 * len(channels), dtype=deriv.dtype,
                         device=rast.device)
    out_da = out_da.index_put((pix,), deriv).reshape(batch_size, height, width, -1)
    return out, out_da
