"""The quality benchmark's measurements without Blender: geometry against a true mesh
(closest points, Chamfer-L1, normal consistency, topology) and the summary against issue 12's
targets."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

trimesh = pytest.importorskip("trimesh")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from bench_quality_lib import geometry, table  # noqa: E402


def test_closest_point_on_triangles_is_the_nearest_of_the_whole_triangle():
    generator = torch.Generator().manual_seed(0)
    a, b, c = torch.randn(3, 300, 3, generator=generator)
    p = 2 * torch.randn(300, 3, generator=generator)
    closest = geometry.closest_on_triangles(p, a, b, c)
    weights = torch.rand(4000, 2, generator=generator)
    weights = torch.where(weights.sum(1, keepdim=True) > 1, 1 - weights, weights)
    dense = a[:, None] + weights[:, :1] * (b - a)[:, None] + weights[:, 1:] * (c - a)[:, None]
    sampled = (dense - p[:, None]).norm(dim=-1).min(dim=1).values  # an upper bound
    found = (closest - p).norm(dim=-1)
    assert (found <= sampled + 1e-5).all()
    assert (sampled - found).max() < 0.05  # and close to it: the point lies on the triangle
    on_plane = torch.linalg.det(torch.stack([b - a, c - a, closest - a], dim=1)).abs()
    assert on_plane.max() < 1e-4


def _sphere(radius=1.0, offset=(0, 0, 0)):
    mesh = trimesh.creation.icosphere(subdivisions=4, radius=radius)
    return geometry.as_trimesh(mesh.vertices + np.asarray(offset), mesh.faces)


def test_chamfer_is_a_fraction_of_the_diagonal_and_zero_for_the_same_surface():
    truth = _sphere()
    same = geometry.compare(truth, truth, samples=4000)
    assert same["chamfer_l1"] < 1e-4 and same["normal_consistency"] > 0.999
    bigger = geometry.compare(_sphere(1.1), truth, samples=4000)
    diagonal = 2 * np.sqrt(3)  # of the unit sphere's bounding box
    assert bigger["chamfer_l1"] == pytest.approx(0.1 / diagonal, rel=0.05)
    assert bigger["normal_consistency"] > 0.99  # same directions, only further out


def test_a_floater_costs_accuracy_and_a_missing_part_completeness():
    truth = _sphere()
    floater = trimesh.util.concatenate([truth, _sphere(0.2, (3, 0, 0))])
    with_floater = geometry.compare(floater, truth, samples=4000)
    assert with_floater["accuracy"] > 10 * with_floater["completeness"]
    assert with_floater["result_topology"] == {"components": 2, "genus": 0}
    missing = geometry.compare(truth, floater, samples=4000)
    assert missing["completeness"] > 10 * missing["accuracy"]


def test_topology_tells_a_ring_from_a_ball_and_an_open_surface():
    torus = trimesh.creation.torus(1.0, 0.3)
    assert geometry.topology(geometry.as_trimesh(torus.vertices, torus.faces)) == {
        "components": 1, "genus": 1}
    assert geometry.topology(_sphere()) == {"components": 1, "genus": 0}
    half = _sphere()
    half = geometry.as_trimesh(half.vertices, half.faces[half.triangles_center[:, 2] > 0])
    assert geometry.topology(half) == {"components": 1, "genus": None}


def _record(scene, mode, psnr, iou=0.99, chamfer=0.001, seconds=60.0, genus=1):
    return {"scene": scene, "mode": mode,
            "cycles": {"psnr_mean": psnr, "psnr_object_mean": psnr - 8, "ssim_mean": 0.95,
                       "iou_mean": iou},
            "geometry": {"chamfer_l1": chamfer, "normal_consistency": 0.98, "triangles": 1000,
                         "result_topology": {"components": 1, "genus": genus},
                         "true_topology": {"components": 1, "genus": 1}},
            "optimize": {"wall_s": seconds, "cpu_s": 2 * seconds, "peak_mib": 900.0}}


def test_summary_checks_each_target_and_names_what_differs():
    records = [_record("ring", "reconstruct", 27.0, genus=0),
               _record("mug", "reconstruct", 24.0, iou=0.96, chamfer=0.02, seconds=400.0),
               {"scene": "box", "mode": "reconstruct", "error": "killed"}]
    stats = table.summary(records)["reconstruct"]
    assert stats["psnr_mean"] == pytest.approx(25.5) and stats["failed"] == ["box"]
    assert stats["topology_differs"] == ["ring"]  # the hole was closed
    met = {key: value["met"] for key, value in stats["targets"].items()}
    assert met == {"psnr_mean": False, "psnr_min": True, "iou_min": False,
                   "chamfer_max": False, "seconds_max": False}
    lines = table.markdown(records).splitlines()
    assert len(lines) == 5 and "failed" in lines[-1] and "| 1 / 0 (1 / 1) |" in lines[2]
    assert any("iou_min: 0.960 against 0.97: MISSED" in line
               for line in table.summary_lines({"reconstruct": stats}))
