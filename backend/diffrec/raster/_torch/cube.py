"""Cube-map addressing for the torch ``texture``: face selection, face coordinates, seams.

Faces are stored ``[..., 6, h, w, C]`` (square, ``h == w``) in the order +x, -x, +y, -y, +z,
-z, oriented as in the OpenGL specification's cube-map table ("Selection of cube map images"):

====  ======  ======  ======
face  major   sc      tc
====  ======  ======  ======
+x    x       -z      -y
-x    -x      +z      -y
+y    y       +x      +z
-y    -y      +x      -z
+z    z       +x      -y
-z    -z      -x      -y
====  ======  ======  ======

``s = (sc / |ma| + 1) / 2`` runs along a face's columns (texel x = s * w - 0.5) and
``t = (tc / |ma| + 1) / 2`` along its rows (row 0 first in memory, at t = 0). For example
direction (1, 0, 0) hits the centre of +x, and (1, -0.5, -0.5) hits +x at s = t = 0.75.
The major axis is the component of largest magnitude; ties prefer x, then y, then z (so
(1, 1, 1) lands on +x). The zero vector and non-finite directions address no face.

Seams: a bilinear tap one texel beyond a face edge reads the texel of the neighbouring face
that touches that edge at the same place along it (the face is padded by one texel ring taken
from its neighbours). A tap beyond two edges at once (a cube corner) has no texel; it reads
the average of the other three taps of its 2x2 footprint, which are the three texels meeting
at that corner. So the exact corner direction (1, 1, 1) returns the mean of those three texels.

The neighbours are found on an integer lattice of half-texels: the centre of texel (row i,
column j) of face ``f`` is ``(2j + 1 - w) S_f + (2i + 1 - w) T_f + w N_f`` (``S_f, T_f, N_f``
being the face's signed unit axes, w its size). A tap beyond an edge has one coordinate of magnitude
``w + 1``; it crosses onto the face of that axis: that coordinate becomes ``±w`` and the old
major coordinate ``±(w - 1)``, the centre of the first texel row on the other side.
"""

from __future__ import annotations

import functools

import torch

# per face: which direction components give (sc, tc, ma), and their signs (the table above)
FACE_COMPONENTS = ((2, 1, 0), (2, 1, 0), (0, 2, 1), (0, 2, 1), (0, 1, 2), (0, 1, 2))
FACE_SIGNS = ((-1, -1, 1), (1, -1, -1), (1, 1, 1), (1, -1, -1), (1, -1, 1), (-1, -1, -1))


def face_axes() -> torch.Tensor:
    """int64 ``[6, 3, 3]``: per face the signed unit vectors S, T, N with sc = S.d, tc = T.d,
    |ma| = N.d."""
    axes = torch.zeros(6, 3, 3, dtype=torch.int64)
    for face, (components, signs) in enumerate(zip(FACE_COMPONENTS, FACE_SIGNS, strict=True)):
        for row, (component, sign) in enumerate(zip(components, signs, strict=True)):
            axes[face, row, component] = sign
    return axes


def select_face(direction: torch.Tensor) -> torch.Tensor:
    """Face index (int64, 0..5) of each direction ``[..., 3]`` by its major axis; argmax
    returns the first maximum, so ties prefer x, then y, then z."""
    direction = direction.detach()
    axis = direction.abs().argmax(-1, keepdim=True)
    negative = direction.gather(-1, axis) < 0
    return (2 * axis + negative).squeeze(-1)


def face_coordinates(direction: torch.Tensor, direction_da: torch.Tensor | None = None):
    """Map directions ``[..., 3]`` (any length) to ``(face, st, valid, st_da)``.

    ``st [..., 2]`` = (s, t) in [0, 1], differentiable w.r.t. ``direction``; ``valid`` is False
    for the zero vector and non-finite input (there ``s = t = 0.5`` as a placeholder). With
    ``direction_da [..., 6]`` = (dx/dX, dx/dY, dy/dX, dy/dY, dz/dX, dz/dY), ``st_da [..., 4]``
    = (ds/dX, ds/dY, dt/dX, dt/dY) on the selected face (else None).
    """
    face = select_face(direction)
    components = torch.tensor(FACE_COMPONENTS, device=direction.device)[face]
    signs = torch.tensor(FACE_SIGNS, dtype=direction.dtype, device=direction.device)[face]
    stm = direction.gather(-1, components) * signs  # (sc, tc, |ma|)
    sc_tc, ma = stm[..., :2], stm[..., 2:]
    valid = (ma[..., 0] > 0) & torch.isfinite(sc_tc[..., 0] + sc_tc[..., 1])
    ma = torch.where(valid.unsqueeze(-1), ma, 1.0)
    st = torch.where(valid.unsqueeze(-1), 0.5 * sc_tc / ma + 0.5, 0.5)
    if direction_da is None:
        return face, st, valid, None
    per_component = direction_da.unflatten(-1, (3, 2))  # [..., (x, y, z), (X, Y)]
    d_stm = per_component.gather(-2, components.unsqueeze(-1).expand(*components.shape, 2))
    d_stm = d_stm * signs.unsqueeze(-1)  # d(sc, tc, |ma|) / d(X, Y)
    # d(0.5 * c / ma) = 0.5 * (dc * ma - c * dma) / ma^2, for c = sc, tc
    st_da = (d_stm[..., :2, :] * ma.unsqueeze(-1) - sc_tc.unsqueeze(-1) * d_stm[..., 2:, :])
    st_da = (0.5 * st_da / (ma * ma).unsqueeze(-1)).flatten(-2)  # (ds/dX, ds/dY, dt/dX, dt/dY)
    return face, st, valid, torch.where(valid.unsqueeze(-1), st_da, 0.0)


@functools.lru_cache(maxsize=32)
def ring_sources(size: int):
    """What the one-texel ring around each face reads: ``(face, row, col, src, weight)``.

    ``face, row, col`` (int64 ``[n]``) address ring texels of the padded faces
    ``[6, size + 2, size + 2]``; ``src`` indexes the flat faces ``[6 * size * size]``. Each ring
    texel is the ``weight``-ed sum of its rows: edge texels have one source of weight 1, the
    24 corner texels three sources of weight 1/3. CPU tensors, cached per size.
    """
    p = size + 2
    face, row, col = torch.meshgrid(torch.arange(6), torch.arange(p), torch.arange(p),
                                    indexing="ij")
    on_ring = (row == 0) | (row == p - 1) | (col == 0) | (col == p - 1)
    corner = ((row == 0) | (row == p - 1)) & ((col == 0) | (col == p - 1))
    s_axis, t_axis, n_axis = face_axes().unbind(1)

    def lattice_source(f, r, c):
        """Flat face-texel index for padded positions one texel beyond exactly one edge."""
        point = ((2 * c - 1 - size)[:, None] * s_axis[f] + (2 * r - 1 - size)[:, None] * t_axis[f]
                 + size * n_axis[f])
        beyond = point.abs() == size + 1
        old_major = n_axis[f] != 0
        point = torch.where(beyond, point.sign() * size, point)
        point = torch.where(old_major, point.sign() * (size - 1), point)
        new_face = select_face(point)
        s_col = ((point * s_axis[new_face]).sum(-1) + size - 1) // 2
        t_row = ((point * t_axis[new_face]).sum(-1) + size - 1) // 2
        return (new_face * size + t_row) * size + s_col

    edge = on_ring & ~corner
    f, r, c = face[edge], row[edge], col[edge]
    edge_src = lattice_source(f, r, c)

    cf, cr, cc = face[corner], row[corner], col[corner]
    inner_r = torch.where(cr == 0, 1, size)  # the face's own corner texel, padded coordinates
    inner_c = torch.where(cc == 0, 1, size)
    own = (cf * size + inner_r - 1) * size + inner_c - 1
    corner_src = torch.stack(
        (lattice_source(cf, cr, inner_c), lattice_source(cf, inner_r, cc), own), -1)

    def cat(edge_part, corner_part):
        return torch.cat((edge_part, corner_part.repeat_interleave(3)))

    src = torch.cat((edge_src, corner_src.reshape(-1)))
    weight = torch.cat((torch.ones(len(edge_src)), torch.full((3 * len(cf),), 1.0 / 3.0)))
    return cat(f, cf), cat(r, cr), cat(c, cc), src, weight
