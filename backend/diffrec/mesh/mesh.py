"""The triangle mesh record shared by the renderer, the optimiser and the file formats.

Attributes have their own index buffers, as in OBJ: a corner ``(t, k)`` of triangle ``t`` uses
``positions[triangles[t, k]]``, ``uvs[uv_triangles[t, k]]``, ``normals[normal_triangles[t, k]]``
and ``tangents[tangent_triangles[t, k]]``. Positions therefore stay welded (shared indices, as
the antialiasing op needs) while UV seams and hard edges split only their own attribute.

Conventions: world space is Blender's (right-handed, Z up, metres). UV origin is the
bottom-left of the texture, as in Blender (v grows upwards; images in memory have rows
top-down, so texel row ``r`` of an ``H``-row image covers ``v`` in ``[1 - (r+1)/H, 1 - r/H]``).
Tangents are ``[.., 4]``: a unit tangent ``xyz`` along increasing ``u``, orthogonal to the
normal, and a handedness ``w`` = +-1 with ``bitangent = w * cross(normal, tangent.xyz)``
(glTF's TANGENT convention; the bitangent points along increasing ``v``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from diffrec.errors import UserError

_ATTRIBUTES = {  # attribute -> (index buffer, trailing size)
    "uvs": ("uv_triangles", 2),
    "normals": ("normal_triangles", 3),
    "tangents": ("tangent_triangles", 4),
}


@dataclass(eq=False)
class Mesh:
    """Triangle mesh. Floats are float32 (float64 allowed for gradient checks), indices int64.

    positions [V, 3]; triangles [T, 3] (counter-clockwise seen from outside);
    uvs [VT, 2] + uv_triangles [T, 3]; normals [VN, 3] (unit) + normal_triangles [T, 3];
    tangents [VG, 4] + tangent_triangles [T, 3]. Optional attributes come with their index
    buffer or not at all. Construction validates shapes, dtypes, index ranges and finiteness
    and converts integer index buffers to int64.
    """

    positions: torch.Tensor
    triangles: torch.Tensor
    uvs: torch.Tensor | None = None
    uv_triangles: torch.Tensor | None = None
    normals: torch.Tensor | None = None
    normal_triangles: torch.Tensor | None = None
    tangents: torch.Tensor | None = None
    tangent_triangles: torch.Tensor | None = None

    def __post_init__(self):
        value_checks: list[tuple[torch.Tensor, str]] = []
        self.triangles = _check_float_and_index(
            "positions", self.positions, 3, "triangles", self.triangles, None, value_checks
        )
        if self.triangles.shape[0] == 0:
            raise UserError("mesh has no triangles")
        for name, (index_name, size) in _ATTRIBUTES.items():
            values, index = getattr(self, name), getattr(self, index_name)
            if (values is None) != (index is None):
                raise UserError(f"mesh {name} and {index_name} must be given together")
            if values is not None:
                index = _check_float_and_index(name, values, size, index_name, index, self,
                                               value_checks)
                setattr(self, index_name, index)
        _raise_first_failed(value_checks)

    @property
    def num_vertices(self) -> int:
        return self.positions.shape[0]

    @property
    def num_triangles(self) -> int:
        return self.triangles.shape[0]

    @property
    def device(self) -> torch.device:
        return self.positions.device

    def replace(self, **changes) -> Mesh:
        """A copy with some fields replaced (validated again)."""
        return dataclasses.replace(self, **changes)

    def to(self, device: torch.device | str) -> Mesh:
        """The same mesh with every tensor on ``device``."""
        return self.replace(
            **{
                field.name: value.to(device)
                for field in dataclasses.fields(self)
                if (value := getattr(self, field.name)) is not None
            }
        )

    def corner_positions(self) -> torch.Tensor:
        """Positions per triangle corner, [T, 3, 3]."""
        return self.positions[self.triangles]


def _check_float_and_index(name, values, size, index_name, index, mesh,
                           value_checks) -> torch.Tensor:
    """Validate one attribute's and its index buffer's shapes, dtypes and device, and append
    the checks of their values (finite, indices in range) to ``value_checks`` as (device flag,
    message) pairs, computed but not read back; returns the index buffer as int64."""
    if not isinstance(values, torch.Tensor) or not isinstance(index, torch.Tensor):
        raise UserError(f"mesh {name} and {index_name} must be torch tensors")
    if values.ndim != 2 or values.shape[1] != size or values.shape[0] == 0:
        raise UserError(f"mesh {name} must be [N, {size}] with N > 0, got {tuple(values.shape)}")
    if values.dtype not in (torch.float32, torch.float64):
        raise UserError(f"mesh {name} must be float32 (or float64), got {values.dtype}")
    if index.dtype.is_floating_point or index.dtype.is_complex or index.dtype == torch.bool:
        raise UserError(f"mesh {index_name} must be an integer tensor, got {index.dtype}")
    expected = (index.shape[0], 3) if mesh is None else tuple(mesh.triangles.shape)
    if index.ndim != 2 or tuple(index.shape) != expected:
        raise UserError(f"mesh {index_name} must be {list(expected)}, got {list(index.shape)}")
    if index.device != values.device or (mesh is not None and values.device != mesh.device):
        raise UserError(f"mesh {name} and {index_name} must be on the mesh's device")
    value_checks.append((~torch.isfinite(values).all(), f"mesh {name} hold NaN or infinite values"))
    if index.numel():
        low, high = torch.aminmax(index)
        value_checks.append(((low < 0) | (high >= values.shape[0]),
                             f"mesh {index_name} index outside [0, {values.shape[0]})"))
    return index.long()


def _raise_first_failed(value_checks: list[tuple[torch.Tensor, str]]) -> None:
    """UserError with the message of the first check whose flag is set. The flags are read
    back together: one wait for the device per mesh (on a GPU, every read is a host sync)."""
    failed = torch.stack([flag for flag, _ in value_checks]).tolist()
    for flag, (_, message) in zip(failed, value_checks, strict=True):
        if flag:
            raise UserError(message)
