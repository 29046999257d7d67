"""UV unwrapping: the real xatlas layout, the grid fallback, every failure path of the child
process (crash, hang, exception, invalid output), the unwrap from a daemonic process (a server
job's), and the usable-UV check."""

import logging
import math
import multiprocessing
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.uv_reference import cover_counts

from diffrec.errors import Cancelled
from diffrec.mesh import Mesh, primitives, with_tangents, with_vertex_normals
from diffrec.pipeline import unwrap as unwrap_module
from diffrec.pipeline.unwrap import (
    UnwrapFailed,
    grid_unwrap,
    has_usable_uvs,
    unwrap,
    uv_layout_problems,
    with_uvs,
)
from diffrec.protocol.settings import Settings
from diffrec.protocol.uv_layout import texel_overlap, triangle_areas


# Workers for the child process; module level so that the child can import them by name.
def segfault_worker(positions, triangles, options):
    os.kill(os.getpid(), signal.SIGSEGV)


def hanging_worker(positions, triangles, options):
    time.sleep(3600)


def missing_package_worker(positions, triangles, options):
    raise ImportError("No module named 'xatlas'")


def grid_worker(positions, triangles, options):
    """A valid layout in xatlas's result format: the grid, one UV vertex per corner."""
    uvs, uv_triangles = grid_unwrap(len(triangles), resolution=options["resolution"])
    return triangles.reshape(-1).astype(np.uint32), uv_triangles.astype(np.uint32), uvs


def out_of_range_worker(positions, triangles, options):
    vmapping, indices, uvs = grid_worker(positions, triangles, options)
    return vmapping, indices, uvs * 3.0


def noisy_sphere(segments=12, rings=6, noise=0.05) -> Mesh:
    sphere = primitives.uv_sphere(segments, rings)
    generator = torch.Generator().manual_seed(1)
    scale = 1 + noise * torch.rand(sphere.num_vertices, 1, generator=generator)
    return Mesh(sphere.positions * scale, sphere.triangles)


def chart_ids(uv_triangles: np.ndarray, num_uvs: int) -> np.ndarray:
    """Chart of every triangle: connected components over shared UV vertices."""
    parent = np.arange(num_uvs)

    def root(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for a, b, c in uv_triangles.tolist():
        parent[root(b)] = root(a)
        parent[root(c)] = root(a)
    return np.array([root(t[0]) for t in uv_triangles.tolist()])


def min_chart_gap(uvs: np.ndarray, uv_triangles: np.ndarray, resolution: int) -> float:
    """Smallest distance in texels between the edges of two different charts (sampled)."""
    charts = chart_ids(uv_triangles, len(uvs))
    s = np.linspace(0, 1, 16)[None, :, None]
    corners = uvs[uv_triangles] * resolution
    edges = np.concatenate(
        [corners[:, k, None] * (1 - s) + corners[:, (k + 1) % 3, None] * s for k in range(3)], 1
    )
    points = torch.from_numpy(edges.reshape(-1, 2))
    owner = torch.from_numpy(np.repeat(charts, edges.shape[1]))
    return min(
        torch.cdist(points[owner == c], points[owner != c]).min().item() for c in np.unique(charts)
    )


def point_segment_distance(p, a, b):
    """Distance from points p [N, 2] to segments a-b [N, 2] (float64)."""
    ab, ap = b - a, p - a
    t = np.clip((ap * ab).sum(-1) / (ab * ab).sum(-1), 0, 1)
    return np.linalg.norm(ap - t[:, None] * ab, axis=-1)


def triangle_distance(first, second):
    """Distance between disjoint triangles [N, 3, 2]: the nearest vertex-edge pair."""
    best = np.full(len(first), np.inf)
    for x, y in ((first, second), (second, first)):
        for vertex in range(3):
            for edge in range(3):
                d = point_segment_distance(x[:, vertex], y[:, edge], y[:, (edge + 1) % 3])
                best = np.minimum(best, d)
    return best


def signed_areas(corners):
    a, b = corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]
    return 0.5 * (a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0])


# --- the real xatlas ----------------------------------------------------------------------------

def child_pids() -> set[int]:
    """This process's live child processes (Linux's /proc; empty elsewhere)."""
    pids = set()
    for children in Path("/proc", str(os.getpid()), "task").glob("*/children"):
        pids.update(int(pid) for pid in children.read_text().split())
    return pids


@pytest.fixture
def no_child_left():
    """Asserts after the test that it left no child process of its own running (children
    that earlier tests left to this process, such as a fork server, are not the unwrap's)."""
    before = child_pids()
    yield
    assert not child_pids() - before


def test_xatlas_layout_covers_every_triangle_in_padded_charts_without_overlap(caplog):
    mesh = noisy_sphere()
    with caplog.at_level(logging.WARNING):
        layout = unwrap(mesh.positions, mesh.triangles, resolution_hint=256, padding_texels=4)
    assert not caplog.records, "xatlas failed and the fallback ran"
    assert (layout.method, layout.warning) == ("xatlas", None)
    uvs, uv_triangles = layout.uvs, layout.uv_triangles
    assert uvs.dtype == torch.float32 and uv_triangles.dtype == torch.int64
    assert uv_triangles.shape == mesh.triangles.shape
    assert len(uvs) < 3 * mesh.num_triangles  # charts share UV vertices: not the grid fallback
    assert uvs.min() >= 0 and uvs.max() <= 1
    uv_np, tri_np = uvs.double().numpy(), uv_triangles.numpy()
    uv_area = triangle_areas(uv_np[tri_np])
    assert (uv_area > 1e-3 * uv_area.mean()).all()
    # UV shapes follow the 3D shapes (xatlas keeps distortion low): area ratios stay within 4x
    ratio = uv_area / triangle_areas(mesh.corner_positions().double().numpy())
    assert ratio.max() / ratio.min() < 4
    assert cover_counts(uv_np, tri_np, 128).max() == 1
    assert texel_overlap(uv_np[tri_np], 256)[1] == 0
    assert len(np.unique(chart_ids(tri_np, len(uv_np)))) > 1
    # padding: about 4 texels between charts (xatlas's atlas is only near 256 texels a side)
    assert min_chart_gap(uv_np, tri_np, 256) >= 3.0


# --- the grid fallback --------------------------------------------------------------------------

@pytest.mark.parametrize("count", [1, 7, 10_000, 50_000])
def test_grid_unwrap_puts_each_triangle_in_its_own_padded_cell(count, caplog):
    resolution, padding = 1024, 4
    uvs, uv_triangles = grid_unwrap(count, resolution=resolution, padding_texels=padding)
    assert uvs.shape == (3 * count, 2) and uvs.dtype == np.float32
    np.testing.assert_array_equal(uv_triangles, np.arange(3 * count).reshape(-1, 3))
    corners = uvs.astype(np.float64)[uv_triangles]
    assert corners.min() >= 0 and corners.max() <= 1
    assert (signed_areas(corners) > 0).all()  # counter-clockwise, non-degenerate

    n = math.ceil(math.sqrt(math.ceil(count / 2)))
    cell_size = 1 / n
    gap = min(padding / resolution, cell_size / 4)  # too small cells shrink the padding
    assert (len(caplog.records) > 0) == (gap < padding / resolution)
    cell = np.floor(corners.mean(1) / cell_size)
    lo, hi = cell * cell_size + gap / 2, (cell + 1) * cell_size - gap / 2
    tol = 1e-6
    assert ((corners >= lo[:, None] - tol) & (corners <= hi[:, None] + tol)).all()
    cell_id = cell[:, 1] * n + cell[:, 0]
    per_cell = np.bincount(cell_id.astype(np.int64))
    assert per_cell.max() <= 2
    # the two triangles of a cell keep the padding between them too
    pairs = np.nonzero(per_cell == 2)[0]
    order = np.argsort(cell_id, kind="stable")
    members = order[np.searchsorted(cell_id[order], pairs)]
    distance = triangle_distance(corners[members], corners[members + 1])
    assert (distance >= gap - tol).all()
    if count == 1:  # one right isosceles triangle with legs 1 - (1 + 1/sqrt(2)) * padding
        leg = 1 - (1 + 1 / math.sqrt(2)) * padding / resolution
        assert triangle_areas(corners).sum() == pytest.approx(leg * leg / 2, rel=1e-5)


def test_grid_unwrap_has_no_rasterized_overlap():
    uvs, uv_triangles = grid_unwrap(10_000, resolution=512, padding_texels=2)
    covered, overlapped = texel_overlap(uvs[uv_triangles], 512)
    assert overlapped == 0 and covered > 0.3 * 512 * 512
    small_uvs, small_triangles = grid_unwrap(7, resolution=64)
    counts = cover_counts(small_uvs, small_triangles, 64)
    assert counts.max() == 1 and counts.sum() > 0.4 * 64 * 64


# --- failures of the child process fall back to the grid ------------------------------------------

def _assert_fell_back(mesh, result, caplog, reason):
    expected_uvs, expected_triangles = grid_unwrap(mesh.num_triangles, resolution=64)
    np.testing.assert_array_equal(result.uvs.numpy(), expected_uvs)
    np.testing.assert_array_equal(result.uv_triangles.numpy(), expected_triangles)
    assert result.method == "grid fallback" and reason in result.warning
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("fallback" in m and reason in m for m in messages), messages


def test_crash_falls_back(caplog, no_child_left):
    mesh = primitives.cube()
    with caplog.at_level(logging.WARNING):
        result = unwrap(mesh.positions, mesh.triangles, resolution_hint=64,
                        worker=segfault_worker)
    _assert_fell_back(mesh, result, caplog, f"exit code -{int(signal.SIGSEGV)}")


def test_hang_is_killed_at_the_time_limit_and_falls_back(caplog, no_child_left):
    mesh = primitives.cube()
    start = time.perf_counter()
    with caplog.at_level(logging.WARNING):
        result = unwrap(mesh.positions, mesh.triangles, resolution_hint=64, timeout_s=2.0,
                        worker=hanging_worker)
    assert time.perf_counter() - start < 10
    _assert_fell_back(mesh, result, caplog, "no answer within 2 s")


def test_a_stop_request_kills_the_unwrap_at_once_instead_of_falling_back(no_child_left):
    mesh = primitives.cube()
    asked = time.perf_counter() + 0.5
    with pytest.raises(Cancelled):
        unwrap(mesh.positions, mesh.triangles, resolution_hint=64, timeout_s=60.0,
               worker=hanging_worker, should_stop=lambda: time.perf_counter() > asked)
    assert time.perf_counter() - asked < 1.0  # within a second of being asked


def test_missing_xatlas_falls_back(caplog, no_child_left):
    mesh = primitives.cube()
    with caplog.at_level(logging.WARNING):
        result = unwrap(mesh.positions, mesh.triangles, resolution_hint=64,
                        worker=missing_package_worker)
    _assert_fell_back(mesh, result, caplog, "ImportError")


def test_invalid_layout_falls_back(caplog, no_child_left):
    mesh = primitives.cube()
    with caplog.at_level(logging.WARNING):
        result = unwrap(mesh.positions, mesh.triangles, resolution_hint=64,
                        worker=out_of_range_worker)
    _assert_fell_back(mesh, result, caplog, "outside [0, 1]")


def test_a_valid_layout_from_the_child_is_returned_as_is(caplog):
    mesh = primitives.cube()
    with caplog.at_level(logging.WARNING):
        layout = unwrap(mesh.positions, mesh.triangles, resolution_hint=256, worker=grid_worker)
    assert not caplog.records and layout.method == "xatlas"
    uvs, uv_triangles = layout.uvs, layout.uv_triangles
    expected_uvs, expected_triangles = grid_unwrap(mesh.num_triangles, resolution=256)
    np.testing.assert_array_equal(uvs.numpy(), expected_uvs)
    np.testing.assert_array_equal(uv_triangles.numpy(), expected_triangles)


def _corrupt(kind, vmapping, indices, uvs):
    if kind == "nan":
        uvs = uvs.copy()
        uvs[0, 0] = np.nan
    elif kind == "collapsed":
        uvs = np.zeros_like(uvs)
    elif kind == "wrong corners":
        vmapping = np.roll(vmapping, 1)
    elif kind == "missing triangle":
        indices = indices[:-1]
    elif kind == "index out of range":
        indices = indices.copy()
        indices[0, 0] = len(uvs)
    return vmapping, indices, uvs


@pytest.mark.parametrize("kind", ["nan", "collapsed", "wrong corners", "missing triangle",
                                  "index out of range"])
def test_invalid_layouts_are_rejected(kind):
    mesh = primitives.cube()
    positions = mesh.positions.numpy()
    triangles = mesh.triangles.numpy().astype(np.uint32)
    result = grid_worker(positions, triangles, {"resolution": 64})
    unwrap_module._checked_layout(result, positions, triangles)  # the intact one passes
    with pytest.raises(UnwrapFailed):
        unwrap_module._checked_layout(_corrupt(kind, *result), positions, triangles)


def test_slivers_flat_in_uv_space_are_tolerated_by_the_area_they_cover():
    """xatlas packs sub-texel slivers to zero UV area, and a trained surface has many; they
    must not throw the layout away for the fallback however many they are, while flat
    triangles covering more than 1 % of the surface are still refused."""
    rng = np.random.default_rng(0)
    big, slivers = 200, 60  # 23 % of the triangles are slivers, 0.003 % of the area
    corners = rng.normal(size=(big + slivers, 3, 3))
    corners[big:] = corners[big:, :1] + 1e-2 * (corners[big:] - corners[big:, :1])
    positions = corners.reshape(-1, 3).astype(np.float32)
    triangles = np.arange(len(positions), dtype=np.uint32).reshape(-1, 3)
    vmapping, indices, uvs = grid_worker(positions, triangles, {"resolution": 1024})
    areas = triangle_areas(corners)
    by_size = np.argsort(areas[:big])

    def flatten(chosen):
        flat = uvs.copy()
        for corner in (1, 2):  # grid corners are unshared: collapse each onto its first
            flat[indices[chosen, corner]] = flat[indices[chosen, 0]]
        return vmapping, indices, flat

    share = areas[big:].sum() / areas.sum()
    assert share < 1e-4
    unwrap_module._checked_layout(flatten(np.arange(big, big + slivers)), positions, triangles)
    # big triangles, smallest first, up to just past 1 % of the area
    cumulative = np.cumsum(areas[by_size]) / areas.sum()
    over = int(np.argmax(cumulative > unwrap_module.MAX_FLAT_UV_FRACTION))
    unwrap_module._checked_layout(flatten(by_size[:over]), positions, triangles)
    with pytest.raises(UnwrapFailed, match=r"of the surface, have zero area in UV space"):
        unwrap_module._checked_layout(flatten(by_size[:over + 1]), positions, triangles)


def test_unwrap_rejects_bad_geometry():
    cube = primitives.cube()
    with pytest.raises(ValueError, match="empty"):
        unwrap(cube.positions, cube.triangles[:0])
    with pytest.raises(ValueError, match="must lie in"):
        unwrap(cube.positions[:4], cube.triangles)
    with pytest.raises(ValueError, match="NaN"):
        unwrap(cube.positions * float("nan"), cube.triangles)


# --- keeping a user's UVs -------------------------------------------------------------------------

def _with_uvs(mesh, uvs, uv_triangles=None):
    uv_triangles = mesh.uv_triangles if uv_triangles is None else uv_triangles
    return mesh.replace(uvs=uvs, uv_triangles=uv_triangles)


def test_clean_layouts_are_usable():
    plane = primitives.plane(4)
    assert has_usable_uvs(plane)
    assert has_usable_uvs(primitives.uv_sphere(16, 8))
    sphere = primitives.uv_sphere(8, 4)
    uvs, uv_triangles = grid_unwrap(sphere.num_triangles)
    assert has_usable_uvs(_with_uvs(sphere, torch.from_numpy(uvs),
                                         torch.from_numpy(uv_triangles)))


def test_bad_layouts_are_not_usable():
    plane = primitives.plane(4)
    folded = plane.uvs.clone()
    folded[:, 0] = (2 * folded[:, 0] - 1).abs()  # both halves on the same texels
    assert "more than one triangle" in " ".join(uv_layout_problems(_with_uvs(plane, folded)))
    assert "outside [0, 1]" in " ".join(uv_layout_problems(_with_uvs(plane, plane.uvs * 1.5)))
    tiled = torch.cat([plane.uvs[:, :1] * 1.2 - 0.1, plane.uvs[:, 1:]], -1)  # u wraps onto itself
    assert "more than one triangle" in " ".join(uv_layout_problems(_with_uvs(plane, tiled)))
    collapsed = torch.full_like(plane.uvs, 0.5)
    assert "no UV area" in " ".join(uv_layout_problems(_with_uvs(plane, collapsed)))
    assert uv_layout_problems(primitives.cube()) == ["the mesh has no UVs"]
    for bad in (_with_uvs(plane, folded), _with_uvs(plane, plane.uvs * 1.5), primitives.cube()):
        assert not has_usable_uvs(bad)


def test_with_uvs_keeps_good_uvs_and_replaces_bad_ones():
    settings = Settings(unwrap_timeout_s=60.0, texture_res=64)
    plane = primitives.plane(4)
    assert with_uvs(plane, settings) == (plane, {"method": "own UVs", "time_s": 0.0,
                                                       "warning": None})
    collapsed = primitives.cube().replace(uvs=torch.zeros(8, 2),
                                          uv_triangles=primitives.cube().triangles)
    cube = with_tangents(with_vertex_normals(collapsed))  # tangents of UVs about to go
    unwrapped, how = with_uvs(cube, settings, worker=grid_worker)
    assert how["method"] == "xatlas" and how["warning"] is None
    assert unwrapped.tangents is None and unwrapped.uvs.dtype == cube.positions.dtype
    expected_uvs, _ = grid_unwrap(cube.num_triangles, resolution=64)
    np.testing.assert_array_equal(unwrapped.uvs.numpy(), expected_uvs)
    assert unwrapped.positions is cube.positions and has_usable_uvs(unwrapped)


def _unwrap_method_in(result_queue):
    cube = primitives.cube()
    result_queue.put(unwrap(cube.positions, cube.triangles, resolution_hint=64).method)


def test_the_unwrap_works_from_a_daemonic_process():
    """A server job runs in a daemonic ``multiprocessing`` process, which may not start
    ``multiprocessing`` children: the unwrap's child must start all the same (issue 25)."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    job = context.Process(target=_unwrap_method_in, args=(results,), daemon=True)
    job.start()
    try:
        assert results.get(timeout=120) == "xatlas"
    finally:
        job.join(10)


def test_uvs_slightly_outside_the_square_are_kept_as_they_wrap():
    """Spot's UVs span [-0.052, 1]: the texture wraps, so they are used, not replaced."""
    plane = primitives.plane(4)
    shifted = _with_uvs(plane, plane.uvs * 0.9 - 0.05)
    assert uv_layout_problems(shifted) == []
    settings = Settings(unwrap_timeout_s=60.0, texture_res=64)
    assert with_uvs(shifted, settings)[0] is shifted


@pytest.mark.slow
def test_the_unwrap_works_in_a_ray_worker():
    """A cluster job runs in a Ray worker process: the unwrap's child starts there too."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        cube = primitives.cube()
        task = ray.remote(lambda: unwrap(cube.positions, cube.triangles,
                                         resolution_hint=64).method)
        assert ray.get(task.remote(), timeout=180) == "xatlas"
    finally:
        ray.shutdown()
