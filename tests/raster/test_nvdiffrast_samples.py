"""nvdiffrast users' scripts run through ``import diffrec.raster as dr`` (their interpolate,
texture and antialias calls given ``ctx=glctx``, which nvdiffrast's do not take): ports,
written here, of the calls nvdiffrast's own samples make (triangle, cube, pose), with
nvdiffrast's names
(``RasterizeCudaContext``, ``RasterizeGLContext``, the ``glctx`` keyword, the log level
functions). Tiny images and few iterations: they run in seconds on the CPU."""

import math

import pytest
import torch

import diffrec.raster as dr

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the samples' .cuda(), made portable


def cube_mesh() -> tuple[torch.Tensor, torch.Tensor]:
    """A unit cube: 8 corners float32 [8, 3] in [-0.5, 0.5]³, 12 triangles int32 [12, 3]."""
    corners = torch.tensor([[x, y, z] for x in (-0.5, 0.5) for y in (-0.5, 0.5)
                            for z in (-0.5, 0.5)], dtype=torch.float32)
    quads = [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)]
    tri = [t for a, b, c, d in quads for t in ((a, b, c), (a, c, d))]
    return corners.to(DEVICE), torch.tensor(tri, dtype=torch.int32, device=DEVICE)


def projection(distance: float = 3.5, fov_degrees: float = 45.0) -> torch.Tensor:
    """OpenGL perspective of a camera ``distance`` away on +z, looking at the origin."""
    f = 1.0 / math.tan(math.radians(fov_degrees) / 2)
    near, far = 0.1, 100.0
    proj = torch.tensor([[f, 0, 0, 0], [0, f, 0, 0],
                         [0, 0, -(far + near) / (far - near), -2 * far * near / (far - near)],
                         [0, 0, -1, 0]])
    view = torch.eye(4)
    view[2, 3] = -distance
    return (proj @ view).to(DEVICE)


def quaternion_matrix(q: torch.Tensor) -> torch.Tensor:
    """4x4 rotation of a (not necessarily unit) quaternion (w, x, y, z), differentiable."""
    w, x, y, z = q / q.norm()
    rotation = torch.stack([
        torch.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)]),
        torch.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)]),
        torch.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)])])
    return torch.block_diag(rotation, torch.ones(1, 1, device=q.device))


def random_quaternion(generator: torch.Generator) -> torch.Tensor:
    q = torch.randn(4, generator=generator)
    return (q / q.norm()).to(DEVICE)


def clip_space(mvp: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    homogeneous = torch.cat([positions, torch.ones_like(positions[:, :1])], -1)
    return (homogeneous @ mvp.T)[None]


def render(glctx, mvp, positions, tri, colors, resolution: int) -> torch.Tensor:
    """The samples' render: rasterize, interpolate the vertex colours, antialias."""
    pos = clip_space(mvp, positions)
    rast, _ = dr.rasterize(glctx, pos, tri, resolution=[resolution, resolution])
    color, _ = dr.interpolate(colors[None], rast, tri, ctx=glctx)
    return dr.antialias(color, rast, pos, tri, ctx=glctx)


def test_triangle_sample_is_exact_and_takes_nvdiffrasts_names():
    glctx = dr.RasterizeGLContext() if DEVICE == "cpu" else dr.RasterizeCudaContext()
    pos = torch.tensor([[[-0.8, -0.8, 0, 1], [0.8, -0.8, 0, 1], [-0.8, 0.8, 0, 1]]],
                       dtype=torch.float32, device=DEVICE)
    col = torch.tensor([[[1, 0, 0], [0, 1, 0], [0, 0, 1]]], dtype=torch.float32, device=DEVICE)
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32, device=DEVICE)
    rast, _ = dr.rasterize(glctx=glctx, pos=pos, tri=tri, resolution=[16, 16])
    out, _ = dr.interpolate(col, rast, tri, ctx=glctx)
    centres = (torch.arange(16, dtype=torch.float32, device=DEVICE) + 0.5) / 8 - 1
    y, x = torch.meshgrid(centres, centres, indexing="ij")  # row 0 at the bottom (OpenGL)
    w1, w2 = (x + 0.8) / 1.6, (y + 0.8) / 1.6
    expected = torch.stack([1 - w1 - w2, w1, w2], -1)
    inside = (expected > 1e-4).all(-1)
    outside = (expected < -1e-4).any(-1)
    torch.testing.assert_close(out[0][inside], expected[inside], atol=1e-5, rtol=0)
    assert (out[0][outside] == 0).all() and inside.sum() > 50


def test_context_names_and_log_levels():
    cuda_ctx, gl_ctx = dr.RasterizeCudaContext(), dr.RasterizeGLContext(output_db=False)
    assert cuda_ctx.device.type == gl_ctx.device.type == DEVICE
    assert cuda_ctx.engine in dr.ENGINES and gl_ctx.engine == cuda_ctx.engine
    pos = torch.tensor([[[-1, -1, 0, 1], [1, -1, 0, 1], [0, 1, 0, 1]]], dtype=torch.float32,
                       device=DEVICE)
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32, device=DEVICE)
    rast, rast_db = dr.rasterize(gl_ctx, pos, tri, [8, 8])
    assert rast.shape == (1, 8, 8, 4) and rast_db.shape == (1, 8, 8, 0), "output_db=False"
    assert dr.rasterize(cuda_ctx, pos, tri, [8, 8])[1].shape == (1, 8, 8, 4)
    with pytest.raises(ValueError, match="automatic"):
        dr.RasterizeGLContext(mode="headless")
    before = dr.get_log_level()
    try:
        for level in (0, 1, 2, 3):
            dr.set_log_level(level)
            assert dr.get_log_level() == level
        with pytest.raises(ValueError):
            dr.set_log_level(7)
    finally:
        dr.set_log_level(before)


def test_cube_sample_fits_vertex_colours_and_positions():
    """cube.py: a cube's vertex colours and positions fitted to renders of the reference cube
    from random orientations."""
    glctx = dr.RasterizeCudaContext()
    generator = torch.Generator().manual_seed(0)
    positions, tri = cube_mesh()
    colors = torch.rand(8, 3, generator=generator).to(DEVICE)
    positions_opt = (positions + 0.1 * torch.randn(8, 3, generator=generator).to(DEVICE)
                     ).requires_grad_()
    colors_opt = torch.rand(8, 3, generator=generator).to(DEVICE).requires_grad_()
    optimizer = torch.optim.Adam([positions_opt, colors_opt], lr=0.02)
    proj = projection()

    def errors() -> tuple[float, float]:
        return ((colors_opt - colors).abs().max().item(),
                (positions_opt - positions).abs().max().item())

    start = errors()
    for _ in range(150):
        mvp = proj @ quaternion_matrix(random_quaternion(generator))
        target = render(glctx, mvp, positions, tri, colors, 32)
        image = render(glctx, mvp, positions_opt, tri, colors_opt, 32)
        loss = ((image - target) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    colour_error, position_error = errors()
    assert colour_error < start[0] / 5 and position_error < start[1] / 3, (start, errors())


def test_pose_sample_recovers_the_orientation():
    """pose.py: the orientation (a quaternion) of a colour cube, fitted to one render of it
    from a start 30 degrees away (gradients through interpolation and antialiased
    silhouettes)."""
    glctx = dr.RasterizeCudaContext()
    generator = torch.Generator().manual_seed(1)
    positions, tri = cube_mesh()
    colors = torch.rand(8, 3, generator=generator).to(DEVICE)
    proj = projection()
    target_q = random_quaternion(generator)
    axis = torch.nn.functional.normalize(torch.randn(3, generator=generator), dim=0).to(DEVICE)
    half = math.radians(30.0) / 2
    offset = torch.cat([torch.tensor([math.cos(half)], device=DEVICE), math.sin(half) * axis])
    w1, v1 = offset[0], offset[1:]
    w2, v2 = target_q[0], target_q[1:]  # start = offset * target (Hamilton product)
    start_q = torch.cat([(w1 * w2 - v1 @ v2)[None], w1 * v2 + w2 * v1 + torch.cross(v1, v2, dim=0)])
    q = start_q.clone().requires_grad_()
    optimizer = torch.optim.Adam([q], lr=0.02)
    target = render(glctx, proj @ quaternion_matrix(target_q), positions, tri, colors, 48)

    def angle_degrees() -> float:
        dot = (q.detach() / q.detach().norm() @ target_q).abs().clamp(max=1.0)
        return math.degrees(2 * math.acos(dot.item()))

    assert angle_degrees() == pytest.approx(30.0, abs=0.01)
    for _ in range(200):
        image = render(glctx, proj @ quaternion_matrix(q), positions, tri, colors, 48)
        loss = ((image - target) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert angle_degrees() < 2.0, angle_degrees()  # 0.87 measured at 48² (pixel-limited)
