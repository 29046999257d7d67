"""A job's base mesh carries its shading normals (``normals`` + ``normal_faces``, as the
add-on sends Blender's corner normals): they reach the pipeline's mesh as sent, and normals
that do not fit the faces are refused with a sentence."""

import numpy as np
import pytest
import torch

from diffrec.camera import orbit_cameras
from diffrec.mesh import face_normals
from diffrec.mesh.primitives import cube
from diffrec.pipeline.job_arrays import from_job_arrays, to_job_arrays
from diffrec.pipeline.views import Views
from diffrec.protocol.settings import parse_settings
from diffrec.server.optimize_runner import JobFailed, _check_inputs


def _flat_box_job():
    box = cube()
    flat = box.replace(normals=face_normals(box.positions, box.triangles)[:6],
                       normal_triangles=torch.arange(6).repeat(2)[:, None].expand(12, 3))
    cameras = orbit_cameras(3, 4.0, 8)
    return flat, to_job_arrays(Views(cameras, torch.rand(3, 8, 8, 4)), flat)


def test_the_base_meshs_normals_travel_as_sent():
    flat, arrays = _flat_box_job()
    assert arrays["normals"].dtype == np.float32 and arrays["normal_faces"].dtype == np.int32
    _, base, _ = from_job_arrays(arrays)
    torch.testing.assert_close(base.normals[base.normal_triangles],
                               flat.normals[flat.normal_triangles])


@pytest.mark.parametrize("change, message", [
    (lambda a: a.pop("normal_faces"), "normals and normal_faces go together"),
    (lambda a: a.update(normal_faces=a["normal_faces"] + 6), "normal_faces must have one row "
     "per face and index the normals sent"),
    (lambda a: a.update(normal_faces=a["normal_faces"][:-1]), "one row per face"),
])
def test_normals_that_do_not_fit_the_faces_are_refused(change, message):
    _, arrays = _flat_box_job()
    change(arrays)
    with pytest.raises(JobFailed, match=message):
        _check_inputs(parse_settings({"mode": "materials", "light": "learn"}), arrays)


def test_vertices_without_faces_are_refused_in_reconstruct_too():
    """Reconstruct needs no mesh, but one sent half was read as a whole one (a KeyError
    deep in the job, 'an unexpected problem in the server')."""
    _, arrays = _flat_box_job()
    for name in ("faces", "uvs", "uv_faces", "normals", "normal_faces"):
        arrays.pop(name, None)
    with pytest.raises(JobFailed, match="vertices and faces go together"):
        _check_inputs(parse_settings({"mode": "reconstruct", "light": "learn"}), arrays)
