"""Split-sum prefiltering of cube maps: box mip pyramids, GGX-prefiltered levels, and the
cosine (irradiance) convolution, all linear in the map and built from reusable operators.

**GGX prefilter.** With the split-sum assumption ``n = v = r`` the prefiltered radiance is
``L_r(r) = sum_k L(l_k) (r.l_k) / sum_k (r.l_k)`` over directions ``l_k`` distributed as the
reflected GGX half-vectors (pdf ``D(h)/4``). diffrec evaluates it with *filtered importance
sampling* (Colbert and Krivanek, GPU Gems 3, ch. 20): a fixed Hammersley set of ``N`` samples
per output texel, each read bilinearly (seam-aware) from the box pyramid of the base map at the
level whose texel solid angle matches the sample's ``1/(N pdf)``. No part of the lobe is cut
off; the approximation is that each sample stands for a box-filtered patch of its own solid
angle, which slightly widens the lobe. The operator (indices and weights of a sparse gather,
``4 N`` taps per texel) is built once per (resolution, level, roughness) and cached.
Its backward is a product with the operator's transpose, built (and cached beside it) for a map
whose gradients are asked for, or, with
``$DIFFREC_LIGHT_BACKWARD=scatter``, a scatter of the operator's own entries that needs no
transpose (half the memory; on a CPU a step 4-10x as long, see ``_backward``).

**Cosine convolution** at the coarsest level is exact texel quadrature: a dense
``[6 S^2, 6 S^2]`` matrix of ``max(n.l, 0) * solid_angle(l)``, rows normalised so that a
constant map stays constant. GGX with ``alpha = 1`` has a constant ``D``, so its split-sum
kernel is the same cosine lobe: the roughness-1 specular level equals the irradiance map.
"""

from __future__ import annotations

import functools
import math
import os
import warnings

import torch
import torch.nn.functional as F

from diffrec.errors import SettingVariableError
from diffrec.light.cube import apply_taps, bilinear_taps, texel_directions, texel_solid_angles
from diffrec.shading.microfacet import ggx_ndf

__all__ = [
    "box_pyramid",
    "cosine_convolve",
    "ggx_prefilter",
    "samples_for_level",
]

# Taps per level above which the sample count drops to its minimum (memory bound).
_TAP_BUDGET = 1 << 20
_MIN_SAMPLES = 16
_MAX_SAMPLES = 256
_CHUNK_TAPS = 1 << 22  # taps turned into CSR rows (entries scattered) at a time
BACKWARD_ENV = "DIFFREC_LIGHT_BACKWARD"


def box_pyramid(cube: torch.Tensor) -> list[torch.Tensor]:
    """2x2 box-averaged levels of a cube map ``[6, R, R, C]`` down to ``[6, 1, 1, C]``
    (``R`` a power of two); level 0 is ``cube`` itself."""
    levels = [cube]
    while levels[-1].shape[1] > 1:
        x = levels[-1].permute(0, 3, 1, 2)
        levels.append(F.avg_pool2d(x, 2).permute(0, 2, 3, 1))
    return levels


def samples_for_level(resolution: int) -> int:
    """Importance samples per texel for an output level of ``resolution``: as many as fit the
    tap budget of 2^20 (4 taps per sample), at least 16 and at most 256."""
    rows = 6 * resolution * resolution
    return max(_MIN_SAMPLES, min(_MAX_SAMPLES, _TAP_BUDGET // (4 * rows)))


def _radical_inverse(k: torch.Tensor) -> torch.Tensor:
    result = torch.zeros(k.shape, dtype=torch.float64)
    scale, k = 0.5, k.clone()
    while bool((k > 0).any()):
        result += (k % 2).double() * scale
        k, scale = k // 2, scale / 2
    return result


def _local_samples(alpha: float, samples: int):
    """Reflected GGX directions about +z (Hammersley set): ``(l [M, 3], pdf [M])``, only the
    ``M <= samples`` above the horizon."""
    k = torch.arange(samples)
    xi = (k.double() + 0.5) / samples
    phi = 2 * math.pi * _radical_inverse(k)
    cos_h = torch.sqrt((1 - xi) / (1 + (alpha * alpha - 1) * xi))
    sin_h = torch.sqrt(1 - cos_h * cos_h)
    h = torch.stack([sin_h * torch.cos(phi), sin_h * torch.sin(phi), cos_h], -1)
    l = 2 * cos_h[:, None] * h - torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    keep = l[:, 2] > 0
    return l[keep], ggx_ndf(cos_h[keep], alpha) / 4


def _tangent_frames(n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    up = torch.zeros_like(n)
    use_x = n[:, 2].abs() > 0.999
    up[:, 0] = use_x.double()
    up[:, 2] = (~use_x).double()
    t1 = F.normalize(torch.linalg.cross(up, n, dim=-1), dim=-1)
    return t1, torch.linalg.cross(n, t1, dim=-1)


def _sample_directions(base_res: int, roughness: float, samples: int, device: str):
    """The Hammersley samples of the GGX lobe about +z: ``(l [M, 3] float64, lod [M])``,
    ``lod`` the box-pyramid level each is read from (texel solid angle ~ ``1/(N pdf)``)."""
    l_local, pdf = _local_samples(roughness * roughness, samples)
    pixel_solid_angle = 4 * math.pi / (6 * base_res * base_res)
    top = int(math.log2(base_res))
    lods = (0.5 * torch.log2(1 / (samples * pdf * pixel_solid_angle))).round().clamp(0, top)
    return l_local.to(device), lods.to(device)


def _ggx_taps(n: torch.Tensor, base_res: int, roughness: float, samples: int):
    """Taps ``(index [T, K] int64, weight [T, K] float64)`` into the flattened box pyramid of
    a ``base_res`` cube that GGX-prefilter the ``T`` output texels of directions ``n [T, 3]``
    (float64); each row's weights sum to 1."""
    l_local, lods = _sample_directions(base_res, roughness, samples, str(n.device))
    t1, t2 = _tangent_frames(n)
    offsets = [0]
    for level in range(int(math.log2(base_res))):
        offsets.append(offsets[-1] + 6 * (base_res >> level) ** 2)
    indices, weights = [], []
    for lod in lods.unique().long().tolist():
        l = l_local[lods == lod]
        direction = (
            t1[:, None] * l[:, 0, None] + t2[:, None] * l[:, 1, None] + n[:, None] * l[:, 2, None]
        )
        index, weight = bilinear_taps(direction.reshape(-1, 3), base_res >> lod)
        indices.append(index.reshape(len(n), -1) + offsets[lod])
        weights.append((weight.reshape(len(n), -1, 4) * l[:, 2, None]).reshape(len(n), -1))
    weight = torch.cat(weights, -1)
    return torch.cat(indices, -1), weight / weight.sum(-1, keepdim=True)


@functools.lru_cache(maxsize=16)
def _ggx_operator(base_res: int, out_res: int, roughness: float, samples: int, device: str):
    """Sparse gather ``(index [6 Ro^2, K] int32, weight [6 Ro^2, K] float32)`` from the
    flattened box pyramid of a ``base_res`` cube to the GGX-prefiltered ``out_res`` cube
    (the weighted-gather path, for devices without sparse matrix products)."""
    n = texel_directions(out_res, device=device).reshape(-1, 3)
    index, weight = _ggx_taps(n, base_res, roughness, samples)
    return index.to(torch.int32), weight.float()


@functools.lru_cache(maxsize=16)
def _ggx_matrix(base_res: int, out_res: int, roughness: float, samples: int, device: str,
                dtype: torch.dtype) -> torch.Tensor:
    """The operator of ``_ggx_taps`` as a sparse CSR matrix ``[6 Ro^2, pyramid texels]``
    (taps of one texel that hit the same source texel summed), with int32 indices. (CSR:
    2-3x faster products than COO on a CPU.) Built ``_CHUNK_TAPS`` taps at a time, so that
    building needs little more memory than the matrix it makes (the taps of a 512 cube's
    sharpest level: 100M); the chunks wait on the host, so that on a GPU their concatenation
    needs room there for the matrix alone, not for it and its chunks."""
    n = texel_directions(out_res, device=device).reshape(-1, 3)
    texels = sum(6 * (base_res >> level) ** 2 for level in range(int(math.log2(base_res)) + 1))
    taps_per_texel = 4 * samples
    chunk = max(1, _CHUNK_TAPS // taps_per_texel)
    host = torch.device("cpu")
    crows, cols, values = [torch.zeros(1, dtype=torch.int32)], [], []
    for first in range(0, len(n), chunk):
        index, weight = _ggx_taps(n[first : first + chunk], base_res, roughness, samples)
        crow, col, value = _csr_from_taps(index, weight.float().to(dtype))  # as the gather's
        crows.append(crow[1:].to(host, torch.int32) + crows[-1][-1])
        cols.append(col.to(host, torch.int32))
        values.append(value.to(host))
    crow, col, value = (torch.cat(parts).to(device) for parts in (crows, cols, values))
    # built sorted and without repeats, as CSR requires: no check needed
    return _csr_tensor(crow, col, value, (len(n), texels))


@functools.lru_cache(maxsize=16)
def _ggx_transpose(base_res: int, out_res: int, roughness: float, samples: int, device: str,
                   dtype: torch.dtype) -> torch.Tensor:
    """The transpose of ``_ggx_matrix`` of the same arguments, CSR with int32 indices, for
    the backward pass: built only for a map whose gradients are asked for (a fixed light's
    prefilter never needs it; on a 2-core CPU the first build of a fixed 64-texel light's
    levels took 0.28-0.31 s without it, 0.34-0.44 s with it)."""
    matrix = _ggx_matrix(base_res, out_res, roughness, samples, device, dtype)
    rows, texels = matrix.shape
    crow_t, col_t, values_t = _csr_transposed(matrix.crow_indices(), matrix.col_indices(),
                                              matrix.values(), texels, _CHUNK_TAPS)
    return _csr_tensor(crow_t, col_t, values_t, (texels, rows))


def _csr_tensor(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor,
                shape: tuple[int, int]) -> torch.Tensor:
    """A CSR tensor of parts already sorted and without repeats (not checked)."""
    with warnings.catch_warnings():  # "CSR support is in beta": products are all we use
        warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(crow, col, values, shape, check_invariants=False)


def _csr_from_taps(index: torch.Tensor, weight: torch.Tensor):
    """CSR ``(crow, col, values)`` of the matrix whose row ``n`` has ``weight[n, k]`` at
    column ``index[n, k]`` (``[N, K]`` each): each row's taps sorted by column and repeats
    summed. Sorting K taps per row replaces a sort of all N K entries (COO's coalesce)."""
    index, order = index.long().sort(dim=1)
    weight = weight.gather(1, order)
    first = torch.ones_like(index, dtype=torch.bool)  # first tap of each run of one column
    first[:, 1:] = index[:, 1:] != index[:, :-1]
    run = first.flatten().cumsum(0) - 1
    values = weight.new_zeros(int(run[-1]) + 1 if run.numel() else 0)
    values.index_add_(0, run, weight.flatten())
    crow = index.new_zeros(len(index) + 1)
    crow[1:] = first.sum(1).cumsum(0)
    return crow, index.flatten()[first.flatten()], values


def _csr_transposed(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, columns: int,
                    chunk: int | None = None):
    """CSR of the transpose of the CSR matrix ``(crow, col, values)`` with ``columns``
    columns, its indices of ``col``'s dtype, each new row's entries in row order. A counting
    sort by column, ``chunk`` entries at a time (default: all at once), so that it needs room
    for little more than the transpose itself: each chunk's entries are sorted stably by
    column and placed after the entries earlier chunks put in the same column."""
    count = len(col)
    chunk = max(1, chunk or count)
    crow_t = crow.new_zeros(columns + 1)
    crow_t[1:] = torch.bincount(col, minlength=columns).cumsum(0)
    next_free = crow_t[:-1].to(torch.int64, copy=True)  # where each column's next entry goes
    rows_t, values_t = torch.empty_like(col), torch.empty_like(values)
    row_starts = crow.long()
    for start in range(0, count, chunk):
        chunk_col = col[start : start + chunk].long()
        order = chunk_col.argsort(stable=True)
        by_column = chunk_col[order]
        rank = torch.arange(len(order), device=col.device) - torch.searchsorted(by_column,
                                                                                 by_column)
        target = next_free[by_column] + rank
        entries = order + start
        rows_t[target] = _entry_rows(row_starts, entries).to(col.dtype)
        values_t[target] = values[entries]
        next_free += torch.bincount(chunk_col, minlength=columns)
    return crow_t, rows_t, values_t


def _entry_rows(crow: torch.Tensor, entries: torch.Tensor) -> torch.Tensor:
    """The row (int64) of each of ``entries`` (positions in the column and value arrays) of
    the CSR matrix whose row pointers are ``crow``, of the same dtype as ``entries``."""
    return torch.searchsorted(crow, entries, right=True) - 1


def _transposed_product(matrix: torch.Tensor, dense: torch.Tensor,
                        chunk: int | None = None) -> torch.Tensor:
    """``matrix.T @ dense`` for a CSR ``matrix`` ``[N, M]`` and ``dense`` ``[N, C]``, without
    the transpose: each entry's ``value * dense[row]`` added to row ``col`` of the result
    (``index_add_``), ``chunk`` entries at a time (default ``_CHUNK_TAPS``), so that it needs
    room for little more than its ``[M, C]`` result."""
    crow, col, values = matrix.crow_indices(), matrix.col_indices(), matrix.values()
    chunk = max(1, chunk or _CHUNK_TAPS)
    out = dense.new_zeros(matrix.shape[1], dense.shape[1])
    for start in range(0, len(col), chunk):
        stop = min(start + chunk, len(col))
        rows = _entry_rows(crow, torch.arange(start, stop, dtype=crow.dtype, device=col.device))
        # int64 columns: the CPU's index_add_ takes 5x as long with int32 ones
        out.index_add_(0, col[start:stop].long(), dense[rows] * values[start:stop, None])
    return out


def _backward() -> str:
    """How the GGX prefilter's backward runs, as ``$DIFFREC_LIGHT_BACKWARD`` says: "transpose"
    (a product with the operator's transpose, cached beside it: the default, and the fastest on
    a CPU and on a GPU) or "scatter" (``_transposed_product``: no transpose built, half the
    operators' memory; a 512 light's step 18 ms against 10 on an H200, 4-10x as long on a
    CPU). "auto" (or unset) is "transpose" on every device."""
    choice = os.environ.get(BACKWARD_ENV, "auto").strip().lower()
    if choice not in ("auto", "transpose", "scatter"):
        raise SettingVariableError(f"${BACKWARD_ENV} must be 'auto', 'transpose' or 'scatter', "
                         f"not {choice!r}")
    return "transpose" if choice == "auto" else choice


class _SparseLinear(torch.autograd.Function):
    """``matrix @ flat`` with the transpose given, so the backward is one more sparse product
    (``embedding_bag``'s backward sorts every tap's index at each call instead), or None: the
    backward scatters ``matrix``'s entries (``_transposed_product``)."""

    @staticmethod
    def forward(ctx, flat, matrix, transposed):
        ctx.matrix, ctx.transposed = matrix, transposed
        return matrix @ flat

    @staticmethod
    def backward(ctx, grad):
        if ctx.transposed is None:
            return _transposed_product(ctx.matrix, grad.contiguous()), None, None
        return ctx.transposed @ grad, None, None


def ggx_prefilter(pyramid: list[torch.Tensor], out_res: int, roughness: float) -> torch.Tensor:
    """GGX-prefilter (split-sum, ``alpha = roughness^2``) the cube whose ``box_pyramid`` is
    ``pyramid``, at output resolution ``out_res``; returns ``[6, out_res, out_res, C]``.
    A sparse matrix product on CPU and CUDA, a weighted gather elsewhere (MPS)."""
    base_res, channels = pyramid[0].shape[1], pyramid[0].shape[-1]
    flat = torch.cat([level.reshape(-1, channels) for level in pyramid])
    samples = samples_for_level(out_res)
    device, backward = str(flat.device), _backward()
    if flat.device.type in ("cpu", "cuda"):
        key = (base_res, out_res, float(roughness), samples, device, flat.dtype)
        differentiated = torch.is_grad_enabled() and flat.requires_grad
        transposed = (_ggx_transpose(*key) if differentiated and backward == "transpose"
                      else None)
        out = _SparseLinear.apply(flat, _ggx_matrix(*key), transposed)
    else:
        index, weight = _ggx_operator(base_res, out_res, float(roughness), samples, device)
        out = apply_taps(flat, index, weight.to(flat.dtype))
    return out.reshape(6, out_res, out_res, channels)


@functools.lru_cache(maxsize=4)
def _cosine_matrix(resolution: int, device: str) -> torch.Tensor:
    n = texel_directions(resolution).reshape(-1, 3)
    weight = (n @ n.T).clamp_min(0) * texel_solid_angles(resolution).reshape(1, -1)
    return (weight / weight.sum(-1, keepdim=True)).float().to(device)


def cosine_convolve(cube: torch.Tensor) -> torch.Tensor:
    """Normalised cosine convolution of a small cube map ``[6, S, S, C]`` (exact quadrature):
    ``E(n)/pi = sum_l L(l) max(n.l, 0) dw(l) / sum_l max(n.l, 0) dw(l)``, ``[6, S, S, C]``.
    A constant map of radiance ``L`` gives ``L`` (the radiance a white Lambertian reflects)."""
    resolution, channels = cube.shape[1], cube.shape[-1]
    matrix = _cosine_matrix(resolution, str(cube.device)).to(cube.dtype)
    return (matrix @ cube.reshape(-1, channels)).reshape(cube.shape)
