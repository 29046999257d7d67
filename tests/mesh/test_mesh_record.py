"""The Mesh record's validation, box fitting and its inverse."""

import pytest
import torch

from diffrec.device_waits import DeviceWaits
from diffrec.errors import UserError
from diffrec.mesh import Mesh, bounding_box, fit_to_box
from diffrec.mesh.primitives import cube, uv_sphere


def test_fit_to_box_and_back():
    mesh = uv_sphere(8, 4)
    scaled = torch.tensor([3.0, 1.0, 0.5])
    mesh = mesh.replace(positions=mesh.positions * scaled + torch.tensor([10.0, -2.0, 5.0]))
    fitted, transform = fit_to_box(mesh, size=2.0)
    lower, upper = bounding_box(fitted.positions)
    torch.testing.assert_close(lower + upper, torch.zeros(3))  # centred
    torch.testing.assert_close((upper - lower).max(), torch.tensor(2.0))  # longest side = 2
    torch.testing.assert_close((upper - lower) / 2, scaled / 3.0)  # uniform scale
    torch.testing.assert_close(transform.invert(fitted.positions), mesh.positions)
    homogeneous = torch.cat([mesh.positions.double(), torch.ones(mesh.num_vertices, 1)], 1)
    by_matrix = (homogeneous @ transform.matrix().T)[:, :3]
    torch.testing.assert_close(by_matrix.float(), fitted.positions)


def test_fit_rejects_a_point():
    mesh = Mesh(torch.ones(3, 3), torch.tensor([[0, 1, 2]]))
    with pytest.raises(UserError, match="coincide"):
        fit_to_box(mesh)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"positions": torch.zeros(8, 2)}, "positions must be"),
        ({"positions": torch.full((8, 3), float("nan"))}, "NaN"),
        ({"positions": torch.zeros(8, 3, dtype=torch.float16)}, "float32"),
        ({"triangles": torch.tensor([[0, 1, 8]])}, "outside"),
        ({"triangles": torch.zeros(0, 3, dtype=torch.int64)}, "no triangles"),
        ({"triangles": torch.zeros(2, 3)}, "integer"),
        ({"uvs": torch.zeros(4, 2)}, "together"),
        (
            {"uvs": torch.zeros(4, 2), "uv_triangles": torch.zeros(3, 3, dtype=torch.int64)},
            r"\[12, 3\]",
        ),
        ({"normals": torch.full((1, 3), float("inf")),
          "normal_triangles": torch.zeros(12, 3, dtype=torch.int64)}, "normals hold NaN"),
        ({"uvs": torch.zeros(4, 2), "uv_triangles": torch.full((12, 3), 4)},
         r"uv_triangles index outside \[0, 4\)"),
    ],
)
def test_bad_meshes_get_clear_errors(changes, message):
    with pytest.raises(UserError, match=message):
        cube().replace(**changes)


def test_indices_become_int64_and_to_moves_every_tensor():
    mesh = cube()
    small = mesh.replace(triangles=mesh.triangles.int())
    assert small.triangles.dtype == torch.int64
    uv_triangles = torch.zeros(12, 3, dtype=torch.int32)
    moved = small.replace(uvs=torch.zeros(1, 2), uv_triangles=uv_triangles).to("cpu")
    assert moved.uv_triangles.dtype == torch.int64 and moved.device == torch.device("cpu")


def test_a_mesh_with_every_attribute_waits_for_its_device_once():
    """Its value checks (finite values, indices in range: seven here) are read back together,
    so a GPU run that builds meshes every iteration waits once per mesh, not seven times."""
    mesh = cube()
    triangles = mesh.triangles
    attributes = {"uvs": torch.rand(8, 2), "uv_triangles": triangles,
                  "normals": torch.rand(8, 3), "normal_triangles": triangles,
                  "tangents": torch.rand(8, 4), "tangent_triangles": triangles}
    with DeviceWaits() as waits:
        mesh.replace(**attributes)
    assert len(waits.calls) == 1
    with DeviceWaits() as waits, pytest.raises(UserError, match="tangents hold NaN"):
        mesh.replace(**{**attributes, "tangents": torch.full((8, 4), float("nan"))})
    assert len(waits.calls) == 1
