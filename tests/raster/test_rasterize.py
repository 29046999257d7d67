"""Torch rasterizer against independent float64 references and finite differences."""

import importlib

import numpy as np
import pytest
import torch
from raster_reference import barycentrics, coverage, pixel_centres

from diffrec import raster
from diffrec.device_waits import DeviceWaits

# the package re-exports the function under the module's name; fetch the module itself
torch_rasterize = importlib.import_module("diffrec.raster._torch.rasterize")

CTX = raster.RasterContext("cpu", impl="torch")
ONE_TRI = torch.tensor([[0, 1, 2]], dtype=torch.int32)

# A perspective triangle (w differs per vertex) that covers part of a 24 x 32 image.
PERSPECTIVE = [[-0.9, -0.7, 0.2, 1.0], [1.3, -0.5, 0.9, 2.0], [-0.2, 1.1, 0.1, 1.4]]
# A triangle with one vertex behind the camera (w < 0): it must be clipped, not wrapped around.
BEHIND = [[-0.6, -0.6, 0.3, 1.0], [0.7, -0.4, 0.5, 1.2], [0.2, 0.5, -1.5, -0.5]]
# A triangle crossing the near plane (z < -w at one vertex) while all w > 0.
NEAR_CROSSING = [[-0.8, -0.8, 0.5, 1.0], [0.8, -0.7, 0.6, 1.0], [0.0, 0.9, -1.8, 1.0]]


def rasterize_one(clip, height, width, dtype=torch.float32):
    pos = torch.tensor([clip], dtype=dtype)
    return raster.rasterize(CTX, pos, ONE_TRI, (height, width))


@pytest.mark.parametrize(
    "clip", [PERSPECTIVE, BEHIND, NEAR_CROSSING], ids=["perspective", "behind", "near"]
)
def test_coverage_barycentrics_and_depth_match_reference(clip):
    height, width = 24, 32
    rast, _ = rasterize_one(clip, height, width)
    inside, ambiguous, b, depth = coverage(np.array(clip), height, width)
    covered = rast[0, ..., 3].numpy() == 1
    assert inside.sum() > 20, "the case must cover pixels to be meaningful"
    assert (~inside).sum() > 20, "the case must also miss pixels"
    assert np.array_equal(covered[~ambiguous], inside[~ambiguous])
    sel = covered & inside
    np.testing.assert_allclose(rast[0, ..., 0].numpy()[sel], b[..., 0][sel], atol=2e-5)
    np.testing.assert_allclose(rast[0, ..., 1].numpy()[sel], b[..., 1][sel], atol=2e-5)
    np.testing.assert_allclose(rast[0, ..., 2].numpy()[sel], depth[sel], atol=2e-5)
    assert (rast[0][~torch.from_numpy(covered)] == 0).all(), "empty pixels must be all zero"


def test_vertex_barycentric_convention_and_bottom_row_first():
    # Vertex 0 at the bottom-left pixel centre, vertex 1 top-left, vertex 2 bottom-right.
    height = width = 8
    X, Y = pixel_centres(height, width)
    clip = [[X[0, 0], Y[0, 0], 0, 1], [X[-1, 0], Y[-1, 0], 0, 1], [X[0, -1], Y[0, -1], 0, 1]]
    # expand slightly so the corner pixel centres are strictly inside
    centre = np.mean(np.array(clip)[:, :2], axis=0)
    clip = [[*(centre + 1.01 * (np.array(c[:2]) - centre)), 0, 1] for c in clip]
    rast, _ = rasterize_one(clip, height, width, dtype=torch.float64)
    # row 0 of the output is the bottom row (Y = -1 side): vertex 0's pixel is rast[0, 0, 0]
    u, v = rast[0, ..., 0], rast[0, ..., 1]
    assert u[0, 0] == pytest.approx(1, abs=0.02) and v[0, 0] == pytest.approx(0, abs=0.02)
    assert u[-1, 0] == pytest.approx(0, abs=0.02) and v[-1, 0] == pytest.approx(1, abs=0.02)
    assert u[0, -1] == pytest.approx(0, abs=0.02) and v[0, -1] == pytest.approx(0, abs=0.02)
    assert rast[0, -1, -1, 3] == 0, "the top-right corner is outside the triangle"


def test_nearest_depth_wins_whatever_the_order():
    near = [[-1, -1, -0.5, 1], [3, -1, -0.5, 1], [-1, 3, -0.5, 1]]
    far = [[-1, -1, 0.5, 1], [3, -1, 0.5, 1], [-1, 3, 0.5, 1]]
    for order, near_id in (((far, near), 2), ((near, far), 1)):
        pos = torch.tensor([order[0] + order[1]], dtype=torch.float32)
        tri = torch.tensor([[0, 1, 2], [3, 4, 5]], dtype=torch.int32)
        rast, _ = raster.rasterize(CTX, pos, tri, (16, 16))
        assert (rast[0, ..., 3] == near_id).all()
        assert torch.allclose(rast[0, ..., 2], torch.tensor(-0.5))


def test_shared_edges_leave_no_cracks():
    # A 7 x 5 grid of quads, jittered, covering more than the screen: every pixel is covered.
    gen = torch.Generator().manual_seed(3)
    xs, ys = torch.linspace(-1.3, 1.3, 8), torch.linspace(-1.2, 1.2, 6)
    gy, gx = torch.meshgrid(ys, xs, indexing="ij")
    jitter = 0.08 * (torch.rand(2, 6, 8, generator=gen) - 0.5)
    jitter[:, [0, -1], :] = 0
    jitter[:, :, [0, -1]] = 0
    verts = torch.stack([gx + jitter[0], gy + jitter[1]], -1).reshape(-1, 2)
    pos = torch.cat([verts, torch.zeros(len(verts), 1), torch.ones(len(verts), 1)], 1)
    idx = torch.arange(48).reshape(6, 8)
    a, b, c, d = idx[:-1, :-1], idx[:-1, 1:], idx[1:, 1:], idx[1:, :-1]
    tri = torch.cat([torch.stack([a, b, c], -1), torch.stack([a, c, d], -1)]).reshape(-1, 3)
    rast, _ = raster.rasterize(CTX, pos[None], tri.to(torch.int32), (64, 64))
    assert (rast[0, ..., 3] > 0).all()


def test_range_mode_equals_instanced_mode():
    gen = torch.Generator().manual_seed(1)
    pos = torch.cat([torch.rand(9, 2, generator=gen) * 2 - 1, torch.rand(9, 1, generator=gen) - 0.5,
                     torch.ones(9, 1)], 1)
    tri = torch.tensor([[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 4, 8]], dtype=torch.int32)
    ranges = torch.tensor([[0, 2], [2, 2], [1, 3]], dtype=torch.int32)
    rast_range, db_range = raster.rasterize(CTX, pos, tri, (20, 20), ranges=ranges)
    for image, (start, count) in enumerate(ranges.tolist()):
        keep = torch.zeros(len(tri), dtype=torch.bool)
        keep[start:start + count] = True
        # instanced with the other triangles made degenerate: ids stay global
        masked = torch.where(keep[:, None], tri, torch.zeros_like(tri))
        rast_inst, db_inst = raster.rasterize(CTX, pos[None], masked, (20, 20))
        assert torch.equal(rast_range[image], rast_inst[0])
        assert torch.equal(db_range[image], db_inst[0])


def test_rast_db_matches_pixel_finite_differences():
    height, width = 24, 32
    _, rast_db = rasterize_one(PERSPECTIVE, height, width, dtype=torch.float64)
    inside, ambiguous, _, _ = coverage(np.array(PERSPECTIVE), height, width)
    X, Y = pixel_centres(height, width)
    h = 1e-4  # pixels
    for axis, (dx, dy) in enumerate(((h, 0), (0, h))):
        plus, _, _ = barycentrics(PERSPECTIVE, X + dx * 2 / width, Y + dy * 2 / height)
        minus, _, _ = barycentrics(PERSPECTIVE, X - dx * 2 / width, Y - dy * 2 / height)
        fd = (plus - minus) / (2 * h)
        sel = inside & ~ambiguous
        np.testing.assert_allclose(rast_db[0, ..., axis].numpy()[sel], fd[..., 0][sel], atol=1e-7)
        np.testing.assert_allclose(rast_db[0, ..., 2 + axis].numpy()[sel], fd[..., 1][sel],
                                   atol=1e-7)


@pytest.mark.parametrize("grad_db", [True, False])
def test_gradients_to_pos_match_finite_differences(grad_db):
    pos = torch.tensor([PERSPECTIVE, NEAR_CROSSING], dtype=torch.float64, requires_grad=True)

    def uv_and_db(p):
        rast, rast_db = raster.rasterize(CTX, p, ONE_TRI, (8, 10), grad_db=grad_db)
        return rast[..., :2], rast_db

    assert torch.autograd.gradcheck(lambda p: uv_and_db(p)[0], (pos,), eps=1e-6, atol=1e-6)
    if grad_db:  # random projections of the Jacobian (fast mode): 320 outputs x 4 channels
        check = torch.autograd.gradcheck
        assert check(lambda p: uv_and_db(p)[1], (pos,), eps=1e-6, atol=1e-5, fast_mode=True)
    else:
        assert not uv_and_db(pos)[1].requires_grad
    depth = raster.rasterize(CTX, pos, ONE_TRI, (12, 16))[0][..., 2]
    (grad,) = torch.autograd.grad(depth.sum(), pos, allow_unused=True)
    assert grad is None or (grad == 0).all(), "z/w carries no gradient, as with nvdiffrast"


def jittered_grid(quads: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Clip-space positions ``[2, V, 4]`` (two perspective views: w from 1 to 1.6) and int32
    triangles of a jittered grid of ``quads x quads`` quads inside the frustum."""
    gen = torch.Generator().manual_seed(seed)
    side = torch.linspace(-0.9, 0.9, quads + 1, dtype=torch.float64)
    gy, gx = torch.meshgrid(side, side, indexing="ij")
    xy = torch.stack([gx, gy], -1).reshape(-1, 2)
    xy = xy + 0.3 / quads * (torch.rand(2, *xy.shape, generator=gen, dtype=torch.float64) - 0.5)
    w = 1.0 + 0.6 * torch.rand(2, len(side) ** 2, 1, generator=gen, dtype=torch.float64)
    z = torch.rand(2, len(side) ** 2, 1, generator=gen, dtype=torch.float64) - 0.5
    pos = torch.cat([xy * w, z * w, w], -1)
    idx = torch.arange(len(side) ** 2).reshape(len(side), len(side))
    a, b, c, d = idx[:-1, :-1], idx[:-1, 1:], idx[1:, 1:], idx[1:, :-1]
    tri = torch.cat([torch.stack([a, b, c], -1), torch.stack([a, c, d], -1)]).reshape(-1, 3)
    return pos, tri.to(torch.int32)


@pytest.mark.parametrize("grad_db", [True, False])
def test_more_triangles_than_covered_pixels_match_reference_and_finite_differences(grad_db):
    """Where the covered pixels are fewer than the triangles (a dense mesh in a small image),
    the edge functions are worked out per covered pixel: barycentrics against the float64
    reference of each pixel's triangle, gradients against finite differences."""
    pos, tri = jittered_grid(12, seed=4)
    height, width = 8, 6
    rast, _ = raster.rasterize(CTX, pos, tri, (height, width))
    assert (rast[..., 3] > 0).sum() < len(tri), "the case must have fewer pixels than triangles"
    X, Y = pixel_centres(height, width)
    for image in range(2):
        ids = rast[image, ..., 3].long() - 1
        for row, col in torch.nonzero(ids >= 0).tolist():
            clip = pos[image, tri[ids[row, col]].long()].numpy()
            b, _, depth = barycentrics(clip, X[row:row + 1, col:col + 1],
                                       Y[row:row + 1, col:col + 1])
            np.testing.assert_allclose(rast[image, row, col, :2].numpy(), b[0, 0, :2],
                                       atol=1e-9)
            # z/w is worked out in float32 for the depth test
            assert float(rast[image, row, col, 2]) == pytest.approx(depth[0, 0], abs=2e-5)
    whole_range = torch.tensor([[0, len(tri)]], dtype=torch.int32)
    in_range = raster.rasterize(CTX, pos[1], tri, (height, width), ranges=whole_range)[0]
    assert torch.equal(in_range[0], rast[1])
    pos.requires_grad_(True)

    def uv_and_db(p):
        rast, rast_db = raster.rasterize(CTX, p, tri, (height, width), grad_db=grad_db)
        return rast[..., :2], rast_db

    check = torch.autograd.gradcheck
    assert check(lambda p: uv_and_db(p)[0], (pos,), eps=1e-6, atol=1e-6, fast_mode=True)
    if grad_db:
        assert check(lambda p: uv_and_db(p)[1], (pos,), eps=1e-6, atol=1e-5, fast_mode=True)


def test_triangles_degenerate_on_screen_cover_nothing():
    """Three vertices on one line through pixel centres, nearer than a triangle that covers
    the image: every pixel stays the far triangle's."""
    far = [[-1, -1, 0.5, 1], [3, -1, 0.5, 1], [-1, 3, 0.5, 1]]
    line = [[-1, -1, -0.5, 1], [1, 1, -0.5, 1], [0, 0, -0.5, 1]]  # the diagonal x = y
    pos = torch.tensor([far + line], dtype=torch.float32)
    tri = torch.tensor([[0, 1, 2], [3, 4, 5]], dtype=torch.int32)
    rast, _ = raster.rasterize(CTX, pos, tri, (8, 8))
    assert (rast[0, ..., 3] == 1).all()


def test_fully_hidden_or_behind_triangles_produce_nothing():
    behind = [[-0.5, -0.5, 0.5, -1.0], [0.5, -0.5, 0.5, -1.0], [0.0, 0.5, 0.5, -1.0]]
    beyond_far = [[-0.5, -0.5, 1.5, 1.0], [0.5, -0.5, 1.5, 1.0], [0.0, 0.5, 1.5, 1.0]]
    for clip in (behind, beyond_far):
        rast, _ = rasterize_one(clip, 8, 8)
        assert (rast == 0).all()


def test_chunking_does_not_change_the_result(monkeypatch):
    gen = torch.Generator().manual_seed(2)
    pos = torch.cat([torch.rand(2, 60, 2, generator=gen) * 2.4 - 1.2,
                     torch.rand(2, 60, 1, generator=gen) - 0.5, torch.ones(2, 60, 1)], -1)
    tri = torch.randint(0, 60, (40, 3), generator=gen, dtype=torch.int32)
    whole = raster.rasterize(CTX, pos, tri, (32, 32))
    monkeypatch.setattr(torch_rasterize, "MAX_PAIRS_PER_CHUNK", 97)
    chunked = raster.rasterize(CTX, pos, tri, (32, 32))
    assert torch.equal(whole[0], chunked[0]) and torch.equal(whole[1], chunked[1])


def test_box_sizes_tested_together_change_nothing_and_save_calls(monkeypatch):
    """Triangles of many box sizes (thin ones across and along, small and large) rasterized
    with every size tested on its own (``CALL_COST`` 0), with sizes joined where a call costs
    more than the extra tests (the default) and with all in one box: the same pixels, depths,
    ids and derivatives, in fewer calls of the coverage test."""
    gen = torch.Generator().manual_seed(5)
    centres = torch.rand(300, 1, 2, generator=gen) * 2 - 1
    extent = torch.rand(300, 1, 2, generator=gen).square() * torch.rand(300, 1, 1, generator=gen)
    corners = centres + (torch.rand(300, 3, 2, generator=gen) - 0.5) * extent
    pos = torch.cat([corners, torch.rand(300, 3, 1, generator=gen) - 0.5,
                     torch.ones(300, 3, 1)], -1).reshape(1, 900, 4)
    tri = torch.arange(900, dtype=torch.int32).reshape(300, 3)
    calls = []
    boxes = torch_rasterize._rasterize_boxes
    monkeypatch.setattr(torch_rasterize, "_rasterize_boxes",
                        lambda *args: calls.append(args[4:6]) or boxes(*args))
    results = {}
    for name, cost in (("apart", 0), ("joined", torch_rasterize.CALL_COST), ("one", 1 << 40)):
        monkeypatch.setattr(torch_rasterize, "CALL_COST", cost)
        calls.clear()
        results[name] = (raster.rasterize(CTX, pos, tri, (64, 96)), list(calls))
    (apart, apart_calls), (joined, joined_calls), (one, one_calls) = results.values()
    assert len(set(apart_calls)) >= 12, "the case must spread its triangles over many sizes"
    assert len(one_calls) == 1 and len(joined_calls) < len(apart_calls) / 2
    assert (apart[0][..., 3] > 0).sum() > 500
    for other in (joined, one):
        assert torch.equal(apart[0], other[0]) and torch.equal(apart[1], other[1])


def test_waits_for_the_device_do_not_grow_with_the_triangles_box_sizes(monkeypatch):
    """Triangles are rasterized in groups by box size; outside each group's coverage test (whose
    covered pixels are a list of data-dependent length), a call makes the host wait for the
    device five times, however many groups there are (each boolean mask and each group's
    member list was a wait before: 31 here). Every size is its own group here."""
    monkeypatch.setattr(torch_rasterize, "CALL_COST", 0)
    gen = torch.Generator().manual_seed(2)
    pos = torch.cat([torch.rand(2, 60, 2, generator=gen) * 2.4 - 1.2,
                     torch.rand(2, 60, 1, generator=gen) - 0.5, torch.ones(2, 60, 1)], -1)
    tri = torch.randint(0, 60, (40, 3), generator=gen, dtype=torch.int32)
    with DeviceWaits() as waits:
        raster.rasterize(CTX, pos, tri, (32, 32))
    in_groups = sum(wait.function == "_rasterize_boxes" for wait in waits.calls)
    assert in_groups >= 8, "the case must spread its triangles over many box sizes"
    assert len(waits.calls) - in_groups <= 5


def test_depth_peeling_returns_successive_surfaces():
    layers_z = [0.1, -0.4, 0.6]
    pos = torch.tensor(
        [[[-1, -1, z, 1], [3, -1, z, 1], [-1, 3, z, 1]] for z in layers_z], dtype=torch.float32
    ).reshape(1, 9, 4)
    tri = torch.tensor([[0, 1, 2], [3, 4, 5], [6, 7, 8]], dtype=torch.int32)
    with raster.DepthPeeler(CTX, pos, tri, (8, 8)) as peeler:
        ids = [peeler.rasterize_next_layer()[0][0, ..., 3].unique().tolist() for _ in range(4)]
    assert ids == [[2.0], [1.0], [3.0], [0.0]]


def test_bad_input_is_rejected_clearly():
    pos = torch.zeros(1, 3, 4)
    with pytest.raises(TypeError, match="int32"):
        raster.rasterize(CTX, pos, ONE_TRI.long(), (8, 8))
    with pytest.raises(TypeError, match="float32"):
        raster.rasterize(CTX, pos.half(), ONE_TRI, (8, 8))
    with pytest.raises(IndexError, match="outside"):
        raster.rasterize(CTX, pos, ONE_TRI + 1, (8, 8))
    with pytest.raises(ValueError, match="resolution"):
        raster.rasterize(CTX, pos, ONE_TRI, (0, 8))
    with pytest.raises(ValueError, match=r"\[B, V, 4\]"):
        raster.rasterize(CTX, pos[0], ONE_TRI, (8, 8))


def test_shared_edge_through_pixel_centres_under_perspective_has_no_crack():
    # A square facing a perspective camera: its diagonal passes exactly through the pixel
    # centres of the image diagonal, so every one of them is an exact tie between the two
    # triangles. Exactly one must take it (this caught cross products that used fused
    # multiply-adds and so were not exactly antisymmetric).
    from diffrec.camera import Cameras, look_at

    cam = Cameras(look_at([[0.0, -4.0, 0.0]], (0, 0, 0)).float(), fx=19.2, fy=19.2, cx=8, cy=8,
                  width=16, height=16)
    quad = torch.tensor([[-3.0, -1.0, -3.0, 1], [3.0, -1.0, -3.0, 1], [3.0, -1.0, 3.0, 1],
                         [-3.0, -1.0, 3.0, 1]])
    pos = (quad @ cam.world_to_clip()[0].T)[None].contiguous()
    tri = torch.tensor([[0, 1, 2], [0, 2, 3]], dtype=torch.int32)
    rast, _ = raster.rasterize(CTX, pos, tri, (16, 16))
    assert (rast[0, ..., 3] > 0).all()
