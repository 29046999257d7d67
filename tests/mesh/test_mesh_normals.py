"""Face and vertex normals against analytic answers, and their gradients."""

import math

import pytest
import torch

from diffrec.mesh import face_normals, vertex_normals
from diffrec.mesh.primitives import cube, uv_sphere


def test_face_normals_point_out_of_the_cube():
    mesh = cube()
    normals = face_normals(mesh.positions, mesh.triangles)
    centroids = mesh.corner_positions().mean(1)
    # On a cube the outward normal is the axis along which the face centroid is at +-1.
    expected = torch.where(centroids.abs() > 0.99, centroids.sign(), torch.zeros(()))
    torch.testing.assert_close(normals, expected)
    area = face_normals(mesh.positions, mesh.triangles, unit=False).norm(dim=-1) / 2
    torch.testing.assert_close(area, torch.full((12,), 2.0))  # half of a 2x2 face


@pytest.mark.parametrize("alternate", [False, True])
def test_angle_weighted_cube_normals_are_the_diagonals(alternate):
    # Each corner sees three faces, each with a total angle of 90 degrees there, whatever
    # the triangulation: the angle-weighted normal is the corner's diagonal.
    mesh = cube(alternate_diagonals=alternate)
    normals = vertex_normals(mesh.positions, mesh.triangles, "angle")
    torch.testing.assert_close(normals, mesh.positions / math.sqrt(3))


def test_area_weighted_cube_normals_depend_on_the_triangulation():
    # Area weighting counts a face twice at corners on its diagonal: not the diagonal there.
    mesh = cube()
    normals = vertex_normals(mesh.positions, mesh.triangles, "area")
    corner = mesh.positions / math.sqrt(3)
    assert (normals * corner).sum(-1).min() < 0.99
    torch.testing.assert_close(normals.norm(dim=-1), torch.ones(8))


@pytest.mark.parametrize(("weighting", "tolerance_deg"), [("angle", 0.7), ("area", 3.0)])
def test_sphere_normals_converge_to_the_radial_direction(weighting, tolerance_deg):
    # The discretisation error (largest next to the poles' triangle fans) is below a bound at
    # 24 x 12 and shrinks at least like the spacing (measured: second order for angle
    # weighting, first order for area weighting).
    errors = []
    for segments in (24, 48):
        mesh = uv_sphere(segments, segments // 2, radius=2.0)
        normals = vertex_normals(mesh.positions, mesh.triangles, weighting)
        radial = mesh.positions / 2.0
        errors.append(torch.acos(torch.clamp((normals * radial).sum(-1), max=1.0)).max())
    assert errors[0] < math.radians(tolerance_deg)
    assert errors[1] / errors[0] < 0.55


def test_vertex_normals_gradcheck_float64():
    positions = torch.tensor(
        [[0.0, 0.0, 0.0], [1.0, 0.1, 0.0], [0.2, 1.0, 0.1], [0.3, 0.2, 1.0]], dtype=torch.float64
    ).requires_grad_()
    triangles = torch.tensor([[0, 2, 1], [0, 1, 3], [1, 2, 3], [0, 3, 2]])
    for weighting in ("angle", "area"):
        assert torch.autograd.gradcheck(
            lambda p, w=weighting: vertex_normals(p, triangles, w), (positions,)
        )


def test_degenerate_triangles_give_finite_normals_and_gradients():
    positions = torch.tensor(
        [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [2.0, 0.0, 0.0]], requires_grad=True
    )
    triangles = torch.tensor([[0, 1, 2], [0, 1, 3], [1, 1, 2]])  # collinear, repeated index
    for weighting in ("angle", "area"):
        normals = vertex_normals(positions, triangles, weighting)
        (grad,) = torch.autograd.grad(normals.sum(), positions)
        assert torch.isfinite(normals).all() and torch.isfinite(grad).all()
        torch.testing.assert_close(normals[:3], torch.tensor([[0.0, 0.0, 1.0]] * 3))
        torch.testing.assert_close(normals[3], torch.zeros(3))  # only on a degenerate triangle


def test_unknown_weighting_is_rejected():
    mesh = cube()
    with pytest.raises(ValueError, match="weighting"):
        vertex_normals(mesh.positions, mesh.triangles, "uniform")


def _flat_cube():
    """The cube with a normal per face (its two triangles share it), as a flat-shaded OBJ
    gives it: 6 normals, the face's corners indexing theirs."""
    mesh = cube()
    normals = face_normals(mesh.positions, mesh.triangles)[:6]  # triangles i and i + 6: face i
    groups = torch.arange(6).repeat(2)[:, None].expand(12, 3)
    return mesh.replace(normals=normals, normal_triangles=groups)


def test_grouped_normals_keep_flat_faces_flat_as_the_surface_moves():
    from diffrec.mesh import with_grouped_normals

    flat = _flat_cube()
    stretched = flat.replace(positions=flat.positions * torch.tensor([3.0, 1.0, 0.5]))
    moved = with_grouped_normals(stretched)
    corner_normals = moved.normals[moved.normal_triangles]
    expected = face_normals(stretched.positions, stretched.triangles)[:, None].expand(-1, 3, -1)
    torch.testing.assert_close(corner_normals, expected)  # still one normal per face
    # one group per vertex is the smooth case: the same as plain vertex normals
    smooth = with_grouped_normals(stretched.replace(normals=stretched.positions.clone(),
                                                    normal_triangles=stretched.triangles))
    torch.testing.assert_close(smooth.normals,
                               vertex_normals(stretched.positions, stretched.triangles))
    # without normals: smooth ones
    assert torch.equal(with_grouped_normals(cube()).normal_triangles, cube().triangles)


def test_welding_merges_equal_normals_of_a_vertex_and_keeps_hard_edges():
    from diffrec.mesh import welded_normals, with_vertex_normals

    # every corner its own copy of the smooth normal: welded back to one per vertex
    smooth = with_vertex_normals(uv_sphere(8, 4))
    per_corner = smooth.replace(normals=smooth.normals[smooth.normal_triangles].reshape(-1, 3),
                                normal_triangles=torch.arange(3 * len(smooth.triangles))
                                .reshape(-1, 3))
    welded = welded_normals(per_corner)
    assert len(welded.normals) == len(smooth.positions)
    torch.testing.assert_close(welded.normals[welded.normal_triangles],
                               smooth.normals[smooth.normal_triangles])
    # the flat cube's three normals at each corner stay apart (6 faces x 4 corners)
    flat = _flat_cube()
    unwelded = flat.replace(normals=flat.normals[flat.normal_triangles].reshape(-1, 3),
                            normal_triangles=torch.arange(36).reshape(-1, 3))
    assert len(welded_normals(unwelded).normals) == 24
