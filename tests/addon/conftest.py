"""Fixtures of the add-on tests: where the check scripts write, and a result the backend wrote."""

from pathlib import Path

import numpy as np
import pytest
import torch

from diffrec.io import read_image
from diffrec.light.envmap import EnvironmentLight
from diffrec.mesh.normals import with_vertex_normals
from diffrec.mesh.primitives import uv_sphere
from diffrec.mesh.tangents import with_tangents
from diffrec.pipeline.outputs import write_result
from diffrec.pipeline.run import Result
from diffrec.render.material import TextureMaterial
from diffrec.render.texture2d import Texture2D


@pytest.fixture(scope="session")
def results_dir(tmp_path_factory) -> Path:
    """Where the check scripts write their results."""
    return tmp_path_factory.mktemp("blender-checks")


@pytest.fixture(scope="module")
def result_folder(tmp_path_factory):
    """A sphere with a random base colour, occlusion over the top half, roughness 0.6, metal
    in the right half, a flat normal map and a random sky; and what is known of it."""
    folder = tmp_path_factory.mktemp("import-result")
    mesh = with_tangents(with_vertex_normals(uv_sphere(16, 8)))
    gen = torch.Generator().manual_seed(0)
    kd = torch.rand(8, 16, 3, generator=gen)
    ks = torch.stack([torch.zeros(8, 16), torch.full((8, 16), 0.6), torch.zeros(8, 16)], -1)
    ks[:4, :, 0], ks[:, 8:, 2] = 0.5, 1.0
    normal = torch.tensor([0.0, 0.0, 1.0]).expand(8, 16, 3).clone()
    light = EnvironmentLight.from_equirect(0.2 + 4 * torch.rand(16, 32, 3, generator=gen),
                                           resolution=32)
    with torch.no_grad():
        material = TextureMaterial(Texture2D(kd), Texture2D(ks), Texture2D(normal))
        write_result(folder / "result", Result(mesh, material, light, {}, None))
    corners = torch.cat([mesh.positions[mesh.triangles].reshape(-1, 3),
                         mesh.uvs[mesh.uv_triangles].reshape(-1, 2)], -1)
    np.savez(folder / "expected.npz", kd=kd.numpy(), ks=ks.numpy(),
             probe=read_image(folder / "result" / "probe.hdr")[..., :3],
             corners=corners.numpy(), triangles=mesh.num_triangles,
             vertices=mesh.num_vertices)
    return folder
