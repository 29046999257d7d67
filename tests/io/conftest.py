"""A textured mesh and material shared by the OBJ and glTF tests."""

import pytest
import torch

from diffrec.io import Material
from diffrec.mesh import with_tangents, with_vertex_normals
from diffrec.mesh.primitives import uv_sphere


@pytest.fixture
def textured_mesh():
    """A UV sphere moved off the origin (so axis mix-ups show), with normals and tangents."""
    mesh = uv_sphere(8, 5)
    mesh = mesh.replace(positions=mesh.positions * 0.7 + torch.tensor([0.5, -2.0, 3.0]))
    return with_tangents(with_vertex_normals(mesh))


@pytest.fixture
def textured_material():
    generator = torch.Generator().manual_seed(7)
    normal = torch.rand(4, 6, 3, generator=generator) - 0.5
    normal[..., 2] = 1.0
    return Material(
        name="painted",
        kd=torch.rand(8, 16, 3, generator=generator),
        ks=torch.rand(4, 8, 3, generator=generator),
        normal=normal / normal.norm(dim=-1, keepdim=True),
    )
