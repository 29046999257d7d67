"""UV unwrapping: xatlas in a child process with a hard time limit, and a fallback that never fails.

xatlas can crash (a smooth icosphere segfaults it) or run for many minutes (a noisy 82k-triangle
sphere took 607 s), so it never runs in this process: ``unwrap`` starts a child process
(``pipeline.unwrap_child``), waits at most ``timeout_s`` for its answer, kills it if it is
late, and checks what it returns. On any failure (crash, time-out, xatlas missing or raising,
an invalid layout) it logs a warning and uses ``grid_unwrap``, a layout that cannot fail.

``has_usable_uvs`` / ``uv_layout_problems`` decide whether a user's own UVs are good enough to
bake into, and ``with_uvs`` keeps them when they are (and unwraps otherwise).

UV conventions are the mesh's: origin bottom-left, ``[0, 1]^2`` covers the texture once.
"""

from __future__ import annotations

import logging
import math
import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from diffrec.errors import Cancelled
from diffrec.geometry.cleanup import check_mesh
from diffrec.mesh import Mesh
from diffrec.pipeline.unwrap_child import UnwrapFailed, xatlas_worker
from diffrec.protocol import uv_layout
from diffrec.protocol.uv_layout import MAX_FLAT_UV_FRACTION, flat_in_uv

log = logging.getLogger(__name__)

DEFAULT_PADDING_TEXELS = 4
STOP_POLL_S = 0.2  # how often a waiting unwrap checks whether it should stop
UV_RANGE_TOLERANCE = 1e-3  # xatlas's UVs this far outside [0, 1] count as inside (clamped)

# worker(positions float32 [V, 3], triangles uint32 [T, 3], options) -> (vmapping uint32 [U],
# indices uint32 [T, 3], uvs float32 [U, 2]): xatlas's result layout. Options: "resolution",
# "padding" (texels). Runs in the child, so it must be a module-level (picklable) function.
UnwrapWorker = Callable[[np.ndarray, np.ndarray, dict], tuple[np.ndarray, np.ndarray, np.ndarray]]


def run_in_child(worker: UnwrapWorker, positions: np.ndarray, triangles: np.ndarray,
                 options: dict, timeout_s: float, should_stop: Callable[[], bool] = lambda: False):
    """Run ``worker`` in a fresh Python process (``pipeline.unwrap_child``) and return its
    result.

    The process is started with ``subprocess``, which works from any process, a daemonic
    ``multiprocessing`` child included (a server job's). Raises ``UnwrapFailed`` when the
    child raises, dies (e.g. a segfault: negative exit code) or has not answered after
    ``timeout_s`` seconds (counted from the start, process start-up included); a late child is
    killed. Raises ``Cancelled`` within ``STOP_POLL_S`` of ``should_stop()`` turning true. The
    child is always gone when this returns.
    """
    with tempfile.TemporaryDirectory(prefix="diffrec-unwrap-") as folder:
        request, answer = Path(folder, "request.pickle"), Path(folder, "result.npz")
        errors = Path(folder, "stderr.txt")  # a file, not a pipe: the child never blocks on it
        request.write_bytes(pickle.dumps((worker, positions, triangles, options)))
        # the child finds what this process finds (a worker from a test module included)
        environment = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        with errors.open("wb") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "diffrec.pipeline.unwrap_child", str(request),
                 str(answer), str(os.getpid())], env=environment, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    process.wait(min(STOP_POLL_S, max(0.0, deadline - time.monotonic())))
                    break
                except subprocess.TimeoutExpired:
                    pass
                if should_stop():
                    raise Cancelled("stopped while unwrapping")
                if time.monotonic() >= deadline:
                    raise UnwrapFailed(f"no answer within {timeout_s:g} s (process killed)")
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
        if not answer.exists():
            last = errors.read_text(errors="replace").strip().splitlines()[-1:] or [""]
            raise UnwrapFailed(f"the process died with exit code {process.returncode}"
                               + (f" ({last[0]})" if last[0] else ""))
        with np.load(answer, allow_pickle=False) as result:
            if "error" in result:
                raise UnwrapFailed(str(result["error"]))
            return result["vmapping"], result["indices"], result["uvs"]


def _checked_layout(result, positions: np.ndarray, triangles: np.ndarray):
    """Validate a worker's (vmapping, indices, uvs); return (uvs float32 [U, 2] clamped to
    [0, 1], uv_triangles int64 [T, 3]) or raise ``UnwrapFailed`` saying what is wrong."""
    if not isinstance(result, tuple) or len(result) != 3:
        raise UnwrapFailed("the result is not (vmapping, indices, uvs)")
    vmapping, indices, uvs = (np.asarray(a) for a in result)
    if indices.shape != triangles.shape or uvs.ndim != 2 or uvs.shape[1:] != (2,):
        raise UnwrapFailed(f"indices {indices.shape} / uvs {uvs.shape} have the wrong shape "
                           f"for {len(triangles)} triangles")
    if vmapping.shape != (len(uvs),) or not np.issubdtype(indices.dtype, np.integer):
        raise UnwrapFailed("vmapping does not match the uvs, or indices are not integers")
    indices = indices.astype(np.int64)
    if indices.min() < 0 or indices.max() >= len(uvs) or (
        len(vmapping) and (vmapping.min() < 0 or vmapping.max() >= len(positions))
    ):
        raise UnwrapFailed("indices or vmapping point outside their arrays")
    if not np.array_equal(vmapping.astype(np.int64)[indices], triangles.astype(np.int64)):
        raise UnwrapFailed("the UV triangles do not map back onto the mesh's triangles")
    if not np.isfinite(uvs).all() or uvs.min() < -UV_RANGE_TOLERANCE or (
        uvs.max() > 1 + UV_RANGE_TOLERANCE
    ):
        raise UnwrapFailed("UVs are not finite or lie outside [0, 1]")
    flat, solid, share = flat_in_uv(positions[triangles], uvs[indices])
    if share > MAX_FLAT_UV_FRACTION:
        raise UnwrapFailed(f"{flat} of {solid} triangles, {share:.1%} of the surface, have "
                           "zero area in UV space")
    return np.clip(uvs, 0.0, 1.0).astype(np.float32), indices


def grid_unwrap(num_triangles: int, *, resolution: int = 1024,
                padding_texels: float = DEFAULT_PADDING_TEXELS):
    """Fallback layout that always succeeds: triangles in pairs, one square cell per pair.

    The ``n x n`` grid has ``n = ceil(sqrt(ceil(T / 2)))`` cells of side ``c = 1 / n`` (cell
    ``k`` at column ``k % n``, row ``k // n`` from the bottom). In cell ``k`` triangle ``2k`` is
    the lower-left right-angled half and ``2k + 1`` the upper-right half, both counter-clockwise,
    corner 0 at the right angle. Every triangle keeps ``p = padding_texels / resolution`` away
    from every other (``p / 2`` inside each cell border, ``p`` across the diagonal), so ``p / 2``
    texels of dilation around each never meet. When cells are too small for that (``p > c / 4``)
    the padding shrinks to ``c / 4`` with a warning.

    Texel efficiency (fraction of the texture covered): ``T / 2 * (c - (1 + 1/sqrt 2) p)^2``,
    0.49 for 1 triangle, 0.44 for 5k and 0.32 for 50k (padding cut to 1.6 texels) at 1024
    texels with 4 texels of padding.
    Triangle shapes are not kept (every triangle becomes a right isosceles one).
    Returns ``uvs`` float32 [3T, 2] (one per corner) and ``uv_triangles`` int64 [T, 3].
    """
    if num_triangles < 1:
        raise ValueError(f"grid_unwrap needs at least one triangle, got {num_triangles}")
    if resolution < 1 or padding_texels < 0:
        raise ValueError("resolution must be >= 1 and padding_texels >= 0")
    cells = math.ceil(num_triangles / 2)
    n = math.ceil(math.sqrt(cells))
    c = 1.0 / n
    p = padding_texels / resolution
    if p > c / 4:
        log.warning("grid unwrap: %d triangles leave cells of %.1f texels at %d texels; "
                    "padding cut from %g to %.2f texels", num_triangles, c * resolution,
                    resolution, padding_texels, c / 4 * resolution)
        p = c / 4
    m, d = p / 2, p / math.sqrt(2.0)  # border margin; diagonal offset (gap = sqrt(2) d = p)
    lower = np.array([[m, m], [c - m - d, m], [m, c - m - d]])
    upper = np.array([[c - m, c - m], [m + d, c - m], [c - m, m + d]])
    k = np.arange(num_triangles) // 2
    origin = np.stack([k % n, k // n], -1) * c  # [T, 2]
    shape = np.where((np.arange(num_triangles) % 2 == 0)[:, None, None], lower, upper)
    uvs = (origin[:, None, :] + shape).reshape(-1, 2)
    uv_triangles = np.arange(3 * num_triangles, dtype=np.int64).reshape(-1, 3)
    return uvs.astype(np.float32), uv_triangles


def _check_geometry(positions: torch.Tensor, triangles: torch.Tensor) -> None:
    if len(triangles) == 0 or len(positions) == 0:
        raise ValueError("cannot unwrap an empty mesh")
    check_mesh(positions, triangles)


@dataclass(frozen=True)
class Layout:
    """A UV layout: ``uvs`` float32 [U, 2] in [0, 1], ``uv_triangles`` int64 [T, 3] (corner
    ``(t, k)`` uses ``uvs[uv_triangles[t, k]]``), the ``method`` that made it ("xatlas" or
    "grid fallback") and, for the fallback, ``warning``: why, in one sentence."""

    uvs: torch.Tensor
    uv_triangles: torch.Tensor
    method: str
    warning: str | None = None


def unwrap(positions: torch.Tensor, triangles: torch.Tensor, *, timeout_s: float = 60.0,
           resolution_hint: int = 1024, padding_texels: float = DEFAULT_PADDING_TEXELS,
           worker: UnwrapWorker = xatlas_worker,
           should_stop: Callable[[], bool] = lambda: False) -> Layout:
    """A ``Layout`` for a mesh, on ``positions``' device.

    xatlas (``worker``) runs in a child process for at most ``timeout_s`` seconds (process
    start-up, about 0.2 s, included) and packs one atlas of about ``resolution_hint`` texels a
    side. ``padding_texels`` is the gap to keep between charts: xatlas gets half of it as
    padding around each chart, and its bilinear option adds about 1.5 texels (a gap of 5.8
    atlas texels measured for 4). xatlas's atlas is only near ``resolution_hint`` (e.g. 305 x
    356 for 256) and the UVs are normalised per axis, so gaps in texels of the final texture
    scale by ``resolution_hint / atlas size``. If xatlas crashes, hangs, is missing, raises or
    returns an invalid layout, a warning is logged and ``grid_unwrap`` (same resolution and
    padding) is returned instead. ``should_stop()`` turning true raises ``Cancelled``.
    """
    _check_geometry(positions, triangles)
    positions_np = positions.detach().cpu().numpy().astype(np.float32)
    triangles_np = triangles.detach().cpu().numpy().astype(np.uint32)
    options = {"resolution": int(resolution_hint), "padding": math.ceil(padding_texels / 2)}
    start = time.perf_counter()
    method, warning = "xatlas", None
    try:
        result = run_in_child(worker, positions_np, triangles_np, options, timeout_s,
                              should_stop)
        uvs, uv_triangles = _checked_layout(result, positions_np, triangles_np)
        log.info("xatlas unwrapped %d triangles into %d UV vertices in %.1f s",
                 len(triangles_np), len(uvs), time.perf_counter() - start)
    except Cancelled:
        raise
    except Exception as exc:  # any failure at all: the fallback below cannot fail
        method = "grid fallback"
        warning = (f"xatlas unwrap failed ({exc}); using the grid fallback layout (every "
                   "triangle in a cell of its own: fewer texels per triangle)")
        log.warning("%s", warning)
        uvs, uv_triangles = grid_unwrap(len(triangles_np), resolution=int(resolution_hint),
                                        padding_texels=padding_texels)
    device = positions.device
    return Layout(torch.from_numpy(uvs).to(device), torch.from_numpy(uv_triangles).to(device),
                  method, warning)


def uv_layout_problems(mesh: Mesh, **kwargs) -> list[str]:
    """Reasons why ``mesh``'s UVs are not fit to bake into (empty list: they are fine): none
    at all, or the protocol's rule (``uv_layout.problems``, ``kwargs`` its limits), which the
    add-on applies to an artist's low-poly before it bakes into it."""
    if mesh.uvs is None:
        return ["the mesh has no UVs"]
    uvs = mesh.uvs.detach().cpu().numpy()
    return uv_layout.problems(mesh.corner_positions().detach().cpu().numpy(),
                              uvs[mesh.uv_triangles.cpu().numpy()], **kwargs)


def has_usable_uvs(mesh: Mesh, **kwargs) -> bool:
    """True when ``mesh``'s UVs can be baked into (see ``uv_layout_problems`` for the checks
    and ``kwargs``); the problems found with UVs it has are logged."""
    problems = uv_layout_problems(mesh, **kwargs)
    if problems and mesh.uvs is not None:
        log.info("not using the mesh's UVs: %s", "; ".join(problems))
    return not problems


def with_uvs(mesh: Mesh, settings,
             should_stop: Callable[[], bool] = lambda: False, *,
             worker: UnwrapWorker = xatlas_worker,
             before_unwrap: Callable[[], None] = lambda: None) -> tuple[Mesh, dict]:
    """``(mesh, how)``: ``mesh`` itself if its UVs are usable (``has_usable_uvs``), else a copy
    with a fresh ``unwrap`` (xatlas, or the fallback) on the mesh's device and dtype; tangents,
    which follow the UVs, are dropped (the geometry recomputes them). ``how`` is what the
    metrics keep: ``method`` ("own UVs", "xatlas", "grid fallback"), ``time_s``, ``warning``
    (None unless the fallback was used).

    ``settings``: the optimisation's
    settings; ``unwrap_timeout_s`` bounds xatlas and ``texture_res`` (texels a side) sizes its
    atlas. ``should_stop()`` turning true raises ``Cancelled``; ``worker`` replaces xatlas
    (tests); ``before_unwrap()`` is called once the mesh's own UVs are found unusable.
    """
    start = time.perf_counter()
    if has_usable_uvs(mesh):
        return mesh, {"method": "own UVs", "time_s": 0.0, "warning": None}
    before_unwrap()
    layout = unwrap(mesh.positions, mesh.triangles, timeout_s=settings.limits.unwrap_timeout_s,
                    resolution_hint=settings.size.texture_res, worker=worker,
                    should_stop=should_stop)
    unwrapped = mesh.replace(uvs=layout.uvs.to(mesh.positions.dtype),
                             uv_triangles=layout.uv_triangles, tangents=None,
                             tangent_triangles=None)
    return unwrapped, {"method": layout.method, "time_s": round(time.perf_counter() - start, 3),
                       "warning": layout.warning}
