"""Torch rasterizer with nvdiffrast's output contract.

Method: homogeneous (2DH) rasterization. For a triangle with clip-space vertices
``p_i = (x_i, y_i, w_i)`` the edge functions ``e_i(q) = cross(p_j, p_k) . q`` at a pixel centre
``q = (X, Y, 1)`` in NDC are proportional to the perspective-correct barycentrics, and they are
all of the sign of ``det = p_0 . cross(p_1, p_2)`` exactly where the pixel's ray meets the
triangle in front of the camera (w > 0). That handles triangles crossing the w = 0 plane with
no explicit clipping; the near/far planes are applied per pixel on z/w, which covers the same
pixels as clipping the triangle to -w <= z <= w.

Two stages:

1. Visibility (no autograd): every triangle's pixel bounding box is expanded into (triangle,
   pixel) pairs, in chunks of bounded size; covered pairs write a 64-bit key (depth, triangle
   id) into a per-pixel buffer with ``scatter_reduce(amin)``: nearest depth wins, ties go to
   the lower id. Neighbouring triangles evaluate their shared edge with exactly negated
   numbers, so a pixel on that edge goes to exactly one of them (a top-left style rule breaks
   ties at zero): no cracks, no double coverage.
2. Attributes (differentiable): for the winning triangle at each covered pixel, u, v (and their
   pixel derivatives for ``rast_db``) are recomputed from ``pos`` with autograd, so gradients
   reach ``pos`` through u and v exactly as with nvdiffrast; z/w carries no gradient.
"""

from __future__ import annotations

import torch

EMPTY_KEY = torch.iinfo(torch.int64).max
MAX_PAIRS_PER_CHUNK = 1 << 22  # (triangle, pixel) candidates evaluated at once: ~100 MB peak
CALL_COST = 1 << 14
"""What one call of ``_rasterize_boxes`` costs beyond its tests, in (triangle, pixel) tests:
0.25 ms a call against about 15 ns a test on a 2-core CPU. Box sizes whose triangles would
cost fewer extra tests in a larger box than a call of their own are tested in it."""


def _check_inputs(pos: torch.Tensor, tri: torch.Tensor, resolution, ranges):
    if not torch.is_tensor(pos) or pos.dtype not in (torch.float32, torch.float64):
        raise TypeError("pos must be a float32 tensor (float64 is accepted by the torch engine)")
    if not torch.is_tensor(tri) or tri.dtype != torch.int32 or tri.ndim != 2 or tri.shape[1] != 3:
        raise TypeError("tri must be an int32 tensor of shape [T, 3]")
    if pos.shape[-1] != 4:
        raise ValueError(f"pos must end in 4 clip-space coordinates, got shape {tuple(pos.shape)}")
    if ranges is None and pos.ndim != 3:
        raise ValueError("instanced mode needs pos of shape [B, V, 4] (or pass ranges)")
    if ranges is not None:
        if pos.ndim != 2:
            raise ValueError("range mode needs pos of shape [V, 4]")
        if ranges.dtype != torch.int32 or ranges.ndim != 2 or ranges.shape[1] != 2:
            raise TypeError("ranges must be an int32 tensor of shape [B, 2]")
        if ranges.device.type != "cpu":
            raise ValueError("ranges must be a CPU tensor")
    height, width = (int(r) for r in resolution)
    if height <= 0 or width <= 0:
        raise ValueError(f"resolution must be positive, got {tuple(resolution)}")
    if tri.numel():
        lowest, highest = torch.stack(torch.aminmax(tri)).tolist()  # one wait for the device
        if lowest < 0 or highest >= pos.shape[-2]:
            raise IndexError(f"tri indexes vertices outside 0..{pos.shape[-2] - 1}")
    return height, width


def _instances(pos: torch.Tensor, tri: torch.Tensor, ranges):
    """Flatten the work into triangle instances: (image index, triangle id, vertex rows).

    Returns ``batch [N]``, ``tri_id [N]`` (int64, index into ``tri``), ``vidx [N, 3]`` (rows of
    ``pos.reshape(-1, 4)``) and the batch size.
    """
    device = pos.device
    tri64 = tri.to(device=device, dtype=torch.int64)
    if ranges is None:
        batch_size, num_verts = pos.shape[0], pos.shape[1]
        num_tris = tri64.shape[0]
        batch = torch.arange(batch_size, device=device).repeat_interleave(num_tris)
        tri_id = torch.arange(num_tris, device=device).repeat(batch_size)
        offsets = torch.arange(batch_size, device=device) * num_verts
        vidx = (tri64[None] + offsets[:, None, None]).reshape(-1, 3)
        return batch, tri_id, vidx, batch_size
    starts, counts = ranges[:, 0].to(torch.int64), ranges[:, 1].to(torch.int64)
    if bool((starts < 0).any() or (counts < 0).any() or (starts + counts > tri.shape[0]).any()):
        raise IndexError("ranges select triangles outside tri")
    batch = torch.arange(len(ranges)).repeat_interleave(counts)
    first = torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
    tri_id = torch.arange(int(counts.sum())) - first + starts[batch]
    batch, tri_id = batch.to(device), tri_id.to(device)
    return batch, tri_id, tri64[tri_id], len(ranges)


def _cross(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cross product with separately rounded products, so that ``cross(a, b)`` is exactly
    ``-cross(b, a)`` (a fused multiply-add, as ``torch.linalg.cross`` may use, breaks that and
    with it the watertightness of shared edges)."""
    ax, ay, az = a.unbind(-1)
    bx, by, bz = b.unbind(-1)
    return torch.stack((ay * bz - az * by, az * bx - ax * bz, ax * by - ay * bx), -1)


def _edge_coefficients(p0, p1, p2):
    """Rows of adj([p0 p1 p2]) for (x, y, w) vertices: e_i(q) = c_i . q. Shapes [..., 3]."""
    return _cross(p1, p2), _cross(p2, p0), _cross(p0, p1)


def _pixel_ndc(index: torch.Tensor, size: int, dtype=torch.float32) -> torch.Tensor:
    """NDC coordinate of pixel centres ``index`` along an axis of ``size`` pixels."""
    return (2.0 * index.to(dtype) + 1.0) / size - 1.0


def _depth_keys(depth: torch.Tensor, tri_id: torch.Tensor) -> torch.Tensor:
    """Order-preserving int64 key: float32 depth in the high word, triangle id in the low."""
    bits = depth.contiguous().view(torch.int32)
    bits = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(torch.int64)
    return (bits << 32) | tri_id


def _pixel_bounds(vertices: torch.Tensor, vidx: torch.Tensor, height: int, width: int):
    """Inclusive pixel ranges ``(x0, x1, y0, y1)`` per triangle (empty when x1 < x0) of the
    clip-space ``vertices [M, 4]`` at rows ``vidx [N, 3]``.

    Triangles entirely behind the camera or outside one side of the frustum get empty ranges;
    triangles crossing w = 0 get the whole image (their coverage test is still exact). What
    can be is worked out per vertex and gathered per triangle (a vertex serves ~6 triangles).
    """
    x, y, z, w = vertices.unbind(-1)
    planes = (x > w, x < -w, y > w, y < -w, z > w, z < -w, w <= 0)  # one bit each
    outcode = sum(plane.to(torch.uint8) << bit for bit, plane in enumerate(planes))
    corners = outcode[vidx]  # [N, 3]
    outside = (corners[:, 0] & corners[:, 1] & corners[:, 2]) != 0
    behind = 1 << (len(planes) - 1)
    crossing = ((corners[:, 0] | corners[:, 1] | corners[:, 2]) & behind) != 0
    safe_w = torch.where(w > 0, w, torch.ones_like(w))
    eps = 1e-4  # pixels; the bounds only need to contain every pixel the exact test accepts

    def span(ndc, size):
        corner_ndc = ndc[vidx]
        lo = torch.ceil((corner_ndc.amin(-1) + 1.0) * (size / 2.0) - 0.5 - eps)
        hi = torch.floor((corner_ndc.amax(-1) + 1.0) * (size / 2.0) - 0.5 + eps)
        lo = torch.where(crossing, torch.zeros_like(lo), lo.clamp(0, size))
        hi = torch.where(crossing, torch.full_like(hi, size - 1), hi.clamp(-1, size - 1))
        return lo.to(torch.int64), hi.to(torch.int64)

    x0, x1 = span(x / safe_w, width)
    y0, y1 = span(y / safe_w, height)
    x1 = torch.where(outside, x0 - 1, x1)
    return x0, x1, y0, y1


def _box_side(n: torch.Tensor) -> torch.Tensor:
    """Smallest box side >= n (n >= 1) of 1, 2, 3, 4, 6, 8, 12, 16, 24...: the powers of two
    and three quarters of them, so that a box holds at most 1.5 times the pixels it must test
    along a side (twice as many with powers of two alone), elementwise."""
    power = torch.pow(2, torch.ceil(torch.log2(n.to(torch.float64)))).to(torch.int64)
    three_quarters = power // 4 * 3
    return torch.where((power >= 4) & (n <= three_quarters), three_quarters, power)


def _visible_keys(pos, tri, ranges, height, width, peel_keys=None):
    """Stage 1: per-pixel int64 key of the nearest covering triangle (EMPTY_KEY where none).

    Triangles are grouped by the size of their pixel bounding box rounded up (``_box_side``),
    sizes of few triangles joined (``_box_groups``), so that each group evaluates its edge
    functions by broadcasting over ``[K, box_h, box_w]`` with no per-pixel gathers. With
    ``peel_keys`` (the previous layer's keys), only surfaces strictly behind it count. Returns
    a flat ``[B * H * W]`` tensor.
    """
    device = pos.device
    with torch.no_grad():
        batch, tri_id, vidx, batch_size = _instances(pos, tri, ranges)
        vertices = pos.detach().to(torch.float32).reshape(-1, 4)
        x0, x1, y0, y1 = _pixel_bounds(vertices, vidx, height, width)
        nx, ny = (x1 - x0 + 1).clamp(min=0), (y1 - y0 + 1).clamp(min=0)
        # off screen, or between pixel centres: covers nothing. Dropped before the edge
        # functions, which cost most per triangle (at a few pixels per triangle most are
        # dropped here). One index list for every tensor (a boolean mask per tensor would make
        # the host wait for the device each time)
        batch, tri_id, vidx, x0, y0, nx, ny = _selected(
            torch.nonzero((nx > 0) & (ny > 0)).squeeze(1), batch, tri_id, vidx, x0, y0, nx, ny)
        clip = vertices[vidx]  # [N, 3, 4]
        xyw = clip[..., [0, 1, 3]]
        coeffs = torch.stack(_edge_coefficients(xyw[:, 0], xyw[:, 1], xyw[:, 2]), 1)
        det = (xyw[:, 0] * coeffs[:, 0]).sum(-1)
        sign = torch.sign(det)
        coeffs = coeffs * sign[:, None, None]  # [N, edge, xyw]
        # sum_i e_i z_i / |det| is z/w at the pixel (there sum_i e_i w_i = |det|)
        z_scaled = clip[..., 2] / torch.where(det != 0, det.abs(), 1.0)[:, None]
        # top-left rule for pixels exactly on an edge: accept e == 0 when (cx, cy) > 0 lexically.
        # A triangle degenerate in screen space (det 0) has all-zero edge functions here and
        # owns no edge: it covers nothing (kept rather than dropped: one wait for the device)
        owner = (coeffs[..., 0] > 0) | ((coeffs[..., 0] == 0) & (coeffs[..., 1] > 0))

        keys = torch.full((batch_size * height * width,), EMPTY_KEY, dtype=torch.int64,
                          device=device)
        box_w, box_h = _box_side(nx), _box_side(ny)
        bucket = box_h * (2 * width) + box_w
        order = torch.argsort(bucket, stable=True)
        codes, counts = torch.stack(
            torch.unique_consecutive(bucket[order], return_counts=True)).tolist()
        boxes = [divmod(code, 2 * width) for code in codes]
        for bh, bw, members in _box_groups(boxes, counts, order):
            for chunk in members.split(max(1, MAX_PAIRS_PER_CHUNK // (bh * bw))):
                _rasterize_boxes(
                    keys, peel_keys, height, width, bh, bw, batch[chunk], tri_id[chunk],
                    x0[chunk], y0[chunk], nx[chunk], ny[chunk], coeffs[chunk], owner[chunk],
                    z_scaled[chunk],
                )
    return keys


def _box_groups(boxes: list[tuple[int, int]], counts: list[int], order: torch.Tensor
                ) -> list[tuple[int, int, torch.Tensor]]:
    """``(box_h, box_w, triangles)`` to test together: the box sizes ``boxes`` (``counts``
    triangles each, which are ``order``'s in turn) joined in turn while testing the next size's
    triangles in the box holding both costs fewer tests than a call of their own
    (``CALL_COST``). A hard-surface mesh of thin triangles had 48 sizes in a batch of 4 views,
    most with a few triangles."""
    groups: list[list[int]] = []  # [box_h, box_w, triangles, first]
    first = 0
    for (bh, bw), count in zip(boxes, counts, strict=True):
        if groups:
            gh, gw, members, start = groups[-1]
            joined_h, joined_w = max(gh, bh), max(gw, bw)
            if ((members + count) * joined_h * joined_w
                    <= members * gh * gw + count * bh * bw + CALL_COST):
                groups[-1] = [joined_h, joined_w, members + count, start]
                first += count
                continue
        groups.append([bh, bw, count, first])
        first += count
    return [(bh, bw, order[start:start + members]) for bh, bw, members, start in groups]


def _selected(index: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``tensors``' rows at ``index``."""
    return tuple(t[index] for t in tensors)


def _rasterize_boxes(keys, peel_keys, height, width, bh, bw, batch, tri_id, x0, y0, nx, ny,
                     coeffs, owner, z_scaled):
    """Test the ``bh x bw`` pixel box of each of K triangles; scatter-min covered keys."""
    device = keys.device
    px = x0[:, None, None] + torch.arange(bw, device=device)[None, None, :]  # [K, 1, bw]
    py = y0[:, None, None] + torch.arange(bh, device=device)[None, :, None]  # [K, bh, 1]
    qx, qy = _pixel_ndc(px, width), _pixel_ndc(py, height)
    inside = (px < (x0 + nx)[:, None, None]) & (py < (y0 + ny)[:, None, None])
    depth = torch.zeros(())
    for edge in range(3):
        cx, cy, cw = (coeffs[:, edge, k, None, None] for k in range(3))
        e = cx * qx + cy * qy + cw  # same operation order for every triangle: watertight
        inside = inside & ((e > 0) | ((e == 0) & owner[:, edge, None, None]))
        depth = depth + e * z_scaled[:, edge, None, None]
    inside &= (depth >= -1.0) & (depth <= 1.0)
    k, iy, ix = torch.nonzero(inside, as_tuple=True)
    pix = (batch[k] * height + py[k, iy, 0]) * width + px[k, 0, ix]
    key = _depth_keys(depth[k, iy, ix], tri_id[k])
    if peel_keys is not None:  # surfaces not behind the last layer leave the pixel as it is
        key = torch.where(key > peel_keys[pix], key, EMPTY_KEY)
    keys.scatter_reduce_(0, pix, key, reduce="amin")


def _covering_edge_coefficients(pos, tri, ranges, batch, tri_id) -> torch.Tensor:
    """Edge coefficients ``[P, edge, xyw]`` (differentiable in ``pos``) of the triangles
    ``tri_id`` of images ``batch`` that cover P pixels: worked out per pixel where there are
    fewer covered pixels than triangles (small images, dense meshes), else once per triangle
    and gathered. The same numbers either way."""
    tri64 = tri.to(device=pos.device, dtype=torch.int64)
    xyw = pos[..., [0, 1, 3]]
    if len(tri_id) < tri64.shape[0] * (pos.shape[0] if ranges is None else 1):
        rows = tri64[tri_id]  # [P, 3]
        corners = xyw[batch[:, None], rows] if ranges is None else xyw[rows]
        return torch.stack(_edge_coefficients(*corners.unbind(-2)), -2)
    corners = xyw[..., tri64, :]
    per_tri = torch.stack(_edge_coefficients(*corners.unbind(-2)), -2).reshape(-1, 3, 3)
    return per_tri[tri_id + batch * tri64.shape[0] if ranges is None else tri_id]


def _rast_from_keys(pos, tri, ranges, keys, height, width, grad_db):
    """Stage 2: differentiable (u, v, z/w, id + 1) and pixel derivatives for covered pixels."""
    batch_size = keys.numel() // (height * width)
    pix = torch.nonzero(keys != EMPTY_KEY).squeeze(1)
    key = keys[pix]
    tri_id = key & 0xFFFFFFFF
    depth_bits = (key >> 32).to(torch.int32)
    depth_bits = torch.where(depth_bits < 0, depth_bits ^ 0x7FFFFFFF, depth_bits)
    depth = depth_bits.view(torch.float32).to(pos.dtype)

    b = torch.div(pix, height * width, rounding_mode="floor")
    py = torch.div(pix % (height * width), width, rounding_mode="floor")
    px = pix % width
    c = _covering_edge_coefficients(pos, tri, ranges, b, tri_id)  # [P, edge, xyw]
    qx, qy = _pixel_ndc(px, width, pos.dtype), _pixel_ndc(py, height, pos.dtype)
    e = c[..., 0] * qx[:, None] + c[..., 1] * qy[:, None] + c[..., 2]
    total = e.sum(-1)
    u, v = e[:, 0] / total, e[:, 1] / total
    rast_vals = torch.stack((u, v, depth, (tri_id + 1).to(pos.dtype)), -1)
    rast = torch.zeros(batch_size * height * width, 4, device=pos.device, dtype=pos.dtype)
    rast = rast.index_put((pix,), rast_vals).reshape(batch_size, height, width, 4)

    # d(e_i / S)/dq = (c_i S - e_i sum_j c_j) / S^2; dq/dX = 2 / W, dq/dY = 2 / H
    cd = c if grad_db else c.detach()
    ed, td = (e, total) if grad_db else (e.detach(), total.detach())
    csum = cd.sum(1)

    def d_dq(i, axis, size):
        return (cd[:, i, axis] * td - ed[:, i] * csum[:, axis]) / (td * td) * (2.0 / size)

    db_vals = torch.stack(
        (d_dq(0, 0, width), d_dq(0, 1, height), d_dq(1, 0, width), d_dq(1, 1, height)), -1
    )
    rast_db = torch.zeros(batch_size * height * width, 4, device=pos.device, dtype=pos.dtype)
    rast_db = rast_db.index_put((pix,), db_vals).reshape(batch_size, height, width, 4)
    return rast, rast_db


def rasterize(pos, tri, resolution, ranges=None, grad_db=True):
    """Rasterize; see ``diffrec.raster.rasterize`` for the contract."""
    height, width = _check_inputs(pos, tri, resolution, ranges)
    keys = _visible_keys(pos, tri, ranges, height, width)
    return _rast_from_keys(pos, tri, ranges, keys, height, width, grad_db)


class DepthPeeler:
    """Successive depth layers: each call returns the nearest surface behind the last one."""

    def __init__(self, pos, tri, resolution, ranges=None, grad_db=True):
        self._height, self._width = _check_inputs(pos, tri, resolution, ranges)
        self._args = (pos, tri, ranges)
        self._grad_db = grad_db
        self._keys = None

    def __enter__(self) -> DepthPeeler:
        self._keys = None
        return self

    def __exit__(self, *exc) -> None:
        self._keys = None

    def rasterize_next_layer(self):
        pos, tri, ranges = self._args
        previous = self._keys
        keys = _visible_keys(pos, tri, ranges, self._height, self._width, peel_keys=previous)
        if previous is not None:  # a pixel emptied by peeling stays empty afterwards
            keys = torch.where(previous == EMPTY_KEY, previous, keys)
        self._keys = keys
        return _rast_from_keys(pos, tri, ranges, keys, self._height, self._width, self._grad_db)
